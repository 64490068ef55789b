"""Shared test helpers: campaign files written from dicts, and the repo's demo paths."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

REPO = Path(__file__).resolve().parent.parent
CAMPAIGNS = REPO / "campaigns"
DEMO = CAMPAIGNS / "demo.toml"


def demo_raw() -> dict[str, Any]:
    return tomllib.loads(DEMO.read_text())


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# A small, fast version of the demo: same task, fewer examples and updates.
FAST = {
    "task": {"options": {"n_conversations": 60, "seed": 0}},
    "batch": {"microbatch": 2, "accumulation": 2},
    # steady times at least 4 updates, then to its precision for at most a quarter second, with
    # no minimum duration (these campaigns check verdicts; test_steady_timing checks the timing).
    # A tiny model's steps on a shared CPU rarely reach ±3 %: most of these end at the budget.
    "phases": {"steady_updates": 4, "steady_budget_s": 0.25, "steady_min_s": 0.0},
}


def pytest_configure(config: pytest.Config) -> None:
    """Compiled modules are cached (`__pycache__`, git-ignored) even where the environment says
    PYTHONDONTWRITEBYTECODE: this runs in the main process before pytest-xdist starts its workers,
    which then keep pytest's rewritten test modules, and every runner process of the suite
    (over a hundred) loads pilot_tui compiled once instead of compiling ~150 modules itself."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    if "PYTEST_XDIST_WORKER" not in os.environ and not compiled("torch"):
        # Installed with `pip --no-compile` (README): the heavy imports are compiled here, once,
        # before the workers start, rather than by all of them at the same time.
        code = "import importlib\nfor m in HEAVY:\n    try: importlib.import_module(m)\n    except ImportError: pass"
        subprocess.run([sys.executable, "-c", code.replace("HEAVY", repr(HEAVY_IMPORTS))], check=False)


# What the workers import to collect the suite, and the runners to start (~3000 modules).
HEAVY_IMPORTS = (
    "torch",
    "torch._dynamo",
    "torch.distributed.run",
    "textual.app",
    "transformers.trainer",
    "trl",
)


def compiled(package: str) -> bool:
    """Whether the package's __init__ has its bytecode cached (pip compiles unless --no-compile)."""
    spec = importlib.util.find_spec(package)
    origin = spec.origin if spec else None
    return origin is None or os.path.exists(importlib.util.cache_from_source(origin))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that hold a `slow` test run first, each whole on one worker (`--dist loadscope`
    in pyproject's addopts): a 60 s module that starts last keeps the other worker idle at the end,
    and a module split across workers builds its module-scoped campaign runs twice."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    slow = {module(item) for item in items if item.get_closest_marker("slow")}
    # A stable sort: the collection order stays within each half and within each module.
    items.sort(key=lambda item: module(item) not in slow)


WARM = REPO / "tests" / "warm"


@pytest.fixture(scope="session", autouse=True)
def warm_processes() -> Iterator[None]:
    """pilot-tui's own processes start forked from one that imported torch already (tests/warm/):
    torch and torch._dynamo cost ~5 s of CPU to import, and the suite starts over a hundred
    processes on 2 cores. Each test worker gets its own warm processes; they exit with it.
    TESTS_PLAIN_SPAWN=1 turns it off; `plain_spawn` does for one test."""
    if os.environ.get("TESTS_PLAIN_SPAWN"):
        yield
        return
    warm_dir = tempfile.mkdtemp(prefix="pt-warm-")  # short: a socket's path is at most 107 bytes
    launcher = f"{shlex.quote(sys.executable)} -S {shlex.quote(str(WARM / 'launch.py'))}"
    env = {"PILOT_TUI_LAUNCHER": launcher, "TESTS_WARM_DIR": warm_dir}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**env, "TESTS_WARM_OWNER": str(os.getpid())}.items():
            mp.setenv(key, value)
        spec = importlib.util.spec_from_file_location("pilot_tui_tests_warm_launch", WARM / "launch.py")
        assert spec is not None and spec.loader is not None
        launch = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launch)
        # The runners' environment, started now rather than on the first test's request.
        launch.start_warm(warm_dir, launch.env_key(dict(os.environ)))
        yield
    if not os.environ.get("TESTS_WARM_KEEP"):  # set it to read the warm processes' logs
        shutil.rmtree(warm_dir, ignore_errors=True)


@pytest.fixture
def plain_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's processes start as plain `python -m` (it checks the process boundary itself)."""
    monkeypatch.delenv("PILOT_TUI_LAUNCHER", raising=False)


@pytest.fixture(scope="module")
def fast_demo_ctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The fast demo campaign's runner context (real task, real splits), on the CPU; one per module."""
    import torch

    from pilot_tui.core.spec import load_spec
    from pilot_tui.runner.context import RunContext
    from pilot_tui.tasks.loader import load_task

    folder = tmp_path_factory.mktemp("fast-demo")
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(deep_merge(demo_raw(), FAST)))
    loaded = load_spec(path)
    return RunContext(loaded, load_task(loaded), torch.device("cpu"), emit=lambda _m: None, work_dir=folder)


@pytest.fixture
def write_campaign(tmp_path: Path):
    """write_campaign(changes, name=..., drop=[sections]) -> path of a campaign file in tmp_path."""

    def write(
        changes: dict[str, Any] | None = None,
        *,
        name: str = "campaign.toml",
        drop: tuple[str, ...] = (),
        fast: bool = True,
    ) -> Path:
        raw = demo_raw()
        if fast:
            raw = deep_merge(raw, FAST)
        raw = deep_merge(raw, changes or {})
        for section in drop:
            raw.pop(section, None)
        path = tmp_path / name
        path.write_text(tomli_w.dumps(raw))
        return path

    return write


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[bool]:
    """Mount a real small (or read-only) tmpfs at `folder` when this user may; yields whether it did.

    A full or read-only disk is a hardware condition: tests that need one get the real thing
    where they can (root in CI containers) and say what they fall back to where they cannot.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ok = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
