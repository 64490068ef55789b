"""Nothing hangs (R24): user code that reads stdin or never returns ends in a row, not a hang.

One runner start: the task's model factory takes its behaviour from a file, one line per call,
so three `load` rows cover `input()`, `breakpoint()`, a sleep stopped at the deadline, and code
that blocks the deadline's signal (killed by the view's watchdog after its grace).
"""

from __future__ import annotations

import os
import signal
import tomllib
from pathlib import Path

import tomli_w
from conftest import CAMPAIGNS

from pilot_tui.core.events import PhaseFinished, PhaseStarted
from pilot_tui.session.driver import Session
from pilot_tui.session.settings import Settings

TASK = f"""
import dataclasses, signal, sys, time
sys.path.insert(0, {str(CAMPAIGNS)!r})
import example_task

def make_task(modes_file, **options):
    task = example_task.make_task(**options)

    def build_model():
        lines = open(modes_file).read().split()
        mode, rest = lines[0], lines[1:]
        open(modes_file, "w").write("\\n".join(rest))
        if mode == "input":
            input("your answer? ")
        elif mode == "breakpoint":
            breakpoint()
        elif mode == "sleep":
            time.sleep(10_000)
        elif mode == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
            time.sleep(10_000)
        return example_task.CharGRU(16)

    return dataclasses.replace(task, build_model=build_model)
"""


def hang_campaign(folder: Path, modes: list[str], time_s: float) -> Path:
    raw = tomllib.loads((CAMPAIGNS / "example.toml").read_text())
    (folder / "hang_task.py").write_text(TASK)
    (folder / "modes.txt").write_text("\n".join(modes))
    raw["task"] = dict(
        raw["task"],
        file="hang_task.py",
        options={**raw["task"]["options"], "modes_file": str(folder / "modes.txt")},
    )
    raw["limits"] = {"load": {"time_s": time_s}}
    path = folder / "hang.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def load_row(session: Session) -> dict:
    rows = [ev.row for ev in session.run_step("load") if isinstance(ev, PhaseFinished)]
    assert len(rows) == 1
    return rows[0]


def test_stdin_reads_and_hung_phases_end_in_rows(tmp_path: Path) -> None:
    spec = hang_campaign(tmp_path, ["input", "breakpoint", "sleep", "blocked"], time_s=2)
    # The default 10 s grace, shortened for the test.
    session = Session(spec, tmp_path / "records", settings=Settings(hung_grace_s=1.0))
    session.start()
    try:
        for mode in ("input", "breakpoint"):
            row = load_row(session)
            assert row["verdict"] == "fail", mode
            assert "read from stdin" in row["reason"] and "input() or breakpoint()" in row["reason"], row
        row = load_row(session)  # sleep: stopped by the runner at its deadline
        assert row["verdict"] == "fail"
        assert row["reason"].startswith("hung: still running at its time_s ceiling of 2 s in load"), row
        assert row["duration_s"] < 2 + 1.0 + 2  # stopped near the deadline, not after it ran
        row = load_row(session)  # blocked: the view kills the runner after the grace
        assert row["verdict"] == "fail"
        assert row["reason"].startswith("hung: still running 3 s after it started"), row
        assert "the runner was killed" in row["reason"]
        assert session.runner_pid is None  # the next step starts a new runner (tested elsewhere)
    finally:
        session.close()
    saved = tomllib.loads(session.record.path.read_text())
    assert [r["verdict"] for r in saved["phases"]] == ["fail"] * 4


def test_a_runner_that_sends_nothing_is_killed_after_the_silence_the_environment_sets(
    tmp_path: Path, monkeypatch, plain_spawn
) -> None:
    """A stopped runner (here SIGSTOP; in life a whole process stuck) sends not even its counters:
    after `PILOT_TUI_SILENCE_S`, read when the session starts, it is killed and the step has a row.
    A plain process: a launcher in the runner's place would be the one stopped."""
    spec = hang_campaign(tmp_path, ["sleep"], time_s=0)  # no ceiling: only the silence ends it
    monkeypatch.setenv("PILOT_TUI_SILENCE_S", "1.5")
    session = Session(spec, tmp_path / "records")
    session.start()
    rows = []
    try:
        for event in session.run_step("load"):
            if isinstance(event, PhaseStarted):
                os.kill(session.runner_pid, signal.SIGSTOP)
            if isinstance(event, PhaseFinished):
                rows.append(event.row)
    finally:
        session.close()
    assert len(rows) == 1 and rows[0]["verdict"] == "fail"
    assert rows[0]["reason"] == "the runner sent nothing for 1.5 s during load (hung) and was killed"
