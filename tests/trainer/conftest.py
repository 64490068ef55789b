"""Trainer campaigns on the user scripts of tests/data/trainer_scripts, run unchanged through
`pilot-tui run … --headless` in a subprocess, on tiny assets built once per session.

The plain Trainer's campaign, the distributed one and the CLI's own errors run that way; the
others run the same headless session with the runner on a thread (`run_in_process`): a runner
process would import transformers again for each (~10 s of CPU on a loaded CI machine). Their
resume, reload and variant workers are new processes either way."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
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
    "phases": {"steady_updates": 3, "skip": ["estimate", "machine"]},
    "overfit": {"examples": 4, "max_steps": 80, "lr": 0.01},
    "resume": {"k": 2, "n": 2},
}
# A broken twin is about the gate it fails: the later, costly phases are skipped, and the
# estimate (a `phases` given here replaces FAST's, whose skip holds it).
LATER = ["estimate", "machine", "overfit", "steady", "eval_longest", "save", "export", "resume", "final"]
# The final reload of a trainer's export (a new process loading the tiny causal LM) is the same
# for every script: the plain and chat campaigns check it; the others skip it.
NO_FINAL = {"steady_updates": 3, "skip": ["estimate", "machine", "final"]}


def _tiny_assets():
    spec = importlib.util.spec_from_file_location("tiny_assets", SCRIPTS / "tiny_assets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_assets"] = module  # its dataclass resolves annotations through it
    spec.loader.exec_module(module)
    return module


def shared_root(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this session sees (the session's own without xdist):
    a campaign run once serves the tests of its module on whichever worker they land."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One worker at a time builds what `path` names; the others wait, then read it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = shared_root(tmp_path_factory) / "trainer-tiny"
    with locked(folder):
        return _tiny_assets().build(folder)  # idempotent: a complete build is reused


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
        "campaign": {"name": Path(script).stem},
        "task": {"trainer_script": str(SCRIPTS / script), "args": args} | sections.pop("task", {}),
    }
    for key, value in (FAST | sections).items():
        raw[key] = dict(value) if isinstance(value, dict) else value
    # Steady times exactly its steady_updates unless a campaign here asks for a precision (the
    # plain Trainer's does): timed to ±3 % for at least 2 s, each steady would cost seconds.
    raw.setdefault("phases", {}).setdefault("steady_precision", 0.0)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


# What every trainer campaign here runs with: nothing from a hub, no tokenizer threads.
SCRIPT_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# The headless run's header line names its record.
RECORD_LINE = re.compile(r"record (\S+\.toml)")


def finished(rc: int, stdout: str, stderr: str, folder: Path) -> Run:
    found = RECORD_LINE.search(stdout)
    record = tomllib.loads(Path(found.group(1)).read_text()) if found else None
    return Run(rc, stdout + stderr, record, folder)


def run_campaign(folder: Path, script: str, args: list[str], **sections: Any) -> Run:
    """The campaign run headless the way a user would: `pilot-tui run campaign.toml --headless`."""
    path = write_campaign(folder, script, args, **sections)
    env = dict(os.environ, **SCRIPT_ENV)
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(path), "--headless"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=folder,
    )
    return finished(proc.returncode, proc.stdout, proc.stderr, folder)


def run_in_process(folder: Path, script: str, args: list[str], **sections: Any) -> Run:
    """The same headless run with the runner on a thread of this process (`InProcessLink`: the
    same `serve`, capture and phase bodies; only the fresh-process workers are processes).

    For a campaign whose subject is its gates (a broken twin's failure is the check's, not the
    process's): a runner process would import transformers again (~10 s of CPU on a loaded CI
    machine). The script's environment and the working folder are put back afterwards (the capture
    leaves what the script set, for the trainer to read later; the link puts back the threads).
    """
    return run_file_in_process(write_campaign(folder, script, args, **sections))


def run_file_in_process(path: Path) -> Run:
    """`run_in_process` on a campaign file written already (by `init`, say), in its folder."""
    from pilot_tui.commands.headless import run_headless
    from pilot_tui.runner.in_process import InProcessLink
    from pilot_tui.session.driver import Session

    folder = path.parent
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(SCRIPT_ENV)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(folder)
        rc = run_headless(Session(path, folder / "records", link=InProcessLink()), out=out, err=err)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return finished(rc, out.getvalue(), err.getvalue(), folder)


def shared_campaign(
    tmp_path_factory, name: str, script: str, args: list[str], *, in_process: bool = False, **sections: Any
) -> Run:
    """`run_campaign` (`run_in_process` if `in_process`) once per session under `name`, whichever
    xdist worker asks first; the others read its output and record."""
    folder = shared_root(tmp_path_factory) / f"trainer-{name}"
    done = folder / "run.json"
    with locked(folder):
        if not done.is_file():
            run = (run_in_process if in_process else run_campaign)(folder, script, args, **sections)
            found = RECORD_LINE.search(run.out)
            done.write_text(
                json.dumps({"rc": run.rc, "out": run.out, "record": found.group(1) if found else ""})
            )
        saved = json.loads(done.read_text())
    record = tomllib.loads(Path(saved["record"]).read_text()) if saved["record"] else None
    return Run(saved["rc"], saved["out"], record, folder)


def passes_every_phase(run: Run) -> None:
    """Every gate the campaign does not skip ran and passed."""
    assert run.rc == 0, run.out
    assert set(run.verdicts().values()) == {"pass"}, run.out
