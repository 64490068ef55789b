"""Trainer campaigns on the user scripts of tests/data/trainer_scripts, run unchanged through
`pilot-tui run … --headless` in a subprocess, on tiny assets built once per session."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

pytest.importorskip("trl", reason="the [trl] extra is not installed: pip install -e '.[test,hf,trl]'")

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "trainer_scripts"
# Small, fast gates: a handful of updates, a tiny overfit subset, resume 2 + 2.
FAST: dict[str, Any] = {
    # The fake-tensor estimate takes ~20 s on a loaded CPU: run once, by the plain Trainer's campaign.
    "phases": {"steady_updates": 3, "skip": ["estimate"]},
    "overfit": {"examples": 4, "max_steps": 80, "lr": 0.01},
    "resume": {"k": 2, "n": 2},
}
# A broken twin is about the gate it fails: the later, costly phases are skipped.
LATER = ["overfit", "steady", "eval_longest", "save", "export", "resume", "final"]


def _tiny_assets():
    spec = importlib.util.spec_from_file_location("tiny_assets", SCRIPTS / "tiny_assets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_assets"] = module  # its dataclass resolves annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return _tiny_assets().build(tmp_path_factory.mktemp("tiny"))


@dataclass
class Run:
    rc: int
    out: str
    record: dict[str, Any] | None
    folder: Path

    def row(self, name: str) -> dict[str, Any]:
        assert self.record is not None, self.out
        return next(r for r in self.record["phases"] if r["step"] == name)

    def verdicts(self) -> dict[str, str]:
        assert self.record is not None, self.out
        return {r["step"]: r["verdict"] for r in self.record["phases"]}


def write_campaign(folder: Path, script: str, args: list[str], **sections: Any) -> Path:
    """`campaign.toml` for `script` (from tests/data/trainer_scripts, unchanged) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {
        "campaign": {"name": script.removesuffix(".py")},
        "task": {"trainer_script": str(SCRIPTS / script), "args": args} | sections.pop("task", {}),
    }
    for key, value in (FAST | sections).items():
        raw[key] = value
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def run_campaign(folder: Path, script: str, args: list[str], **sections: Any) -> Run:
    """The campaign run headless the way a user would: `pilot-tui run campaign.toml --headless`."""
    path = write_campaign(folder, script, args, **sections)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(path), "--headless"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=folder,
    )
    out = proc.stdout + proc.stderr
    found = re.search(r"record (\S+\.toml)", proc.stdout)
    record = tomllib.loads(Path(found.group(1)).read_text()) if found else None
    return Run(proc.returncode, out, record, folder)


def passes_every_phase(run: Run) -> None:
    """Every gate ran and passed."""
    assert run.rc == 0, run.out
    assert set(run.verdicts().values()) == {"pass"}, run.out
