"""Shared test helpers: campaign files written from dicts, and the repo's demo paths."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
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
    # steady times at least 4 updates, then to its precision for at most a second, with no
    # minimum duration (these campaigns check verdicts; test_steady_timing checks the minimum).
    "phases": {"steady_updates": 4, "steady_budget_s": 1.0, "steady_min_s": 0.0},
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that hold a `slow` test run first, each whole on one worker (`--dist loadscope`
    in pyproject's addopts): a 60 s module that starts last keeps the other worker idle at the end,
    and a module split across workers builds its module-scoped campaign runs twice."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    slow = {module(item) for item in items if item.get_closest_marker("slow")}
    # A stable sort: the collection order stays within each half and within each module.
    items.sort(key=lambda item: module(item) not in slow)


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
