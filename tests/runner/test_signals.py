"""SIGTERM / SIGHUP / SIGINT to the headless view act as a cancel (R24): the step in flight gets
its row, the record is saved with its plan, and the exit code names the signal (128 + n)."""

from __future__ import annotations

import io
import os
import signal
import tomllib
from pathlib import Path

from pilot_tui.commands.headless import run_headless
from pilot_tui.core import phase_table
from pilot_tui.core.events import PhaseProgress
from pilot_tui.session.driver import Session


def test_sigterm_mid_phase_leaves_its_row_and_a_clean_record(write_campaign, tmp_path: Path) -> None:
    spec = write_campaign(
        {
            "phases": {
                "steady_updates": 5000,
                "skip": [n for n in phase_table.names() if n != "steady"],
            },
            "limits": {"default": {"time_s": 0, "memory_mb": 0}},
        }
    )
    session = Session(spec, tmp_path / "records")
    run_step = session.run_step
    sent: list[str] = []

    def signalled_run_step(key, overrides=None):
        for ev in run_step(key, overrides):
            if isinstance(ev, PhaseProgress) and key == "steady" and not sent:
                sent.append(key)
                os.kill(os.getpid(), signal.SIGTERM)  # handled in this (main) thread
            yield ev

    session.run_step = signalled_run_step  # type: ignore[method-assign]
    out = io.StringIO()
    code = run_headless(session, out=out, err=io.StringIO())
    assert sent == ["steady"]
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in out.getvalue().splitlines()[-1]
    saved = tomllib.loads(session.record.path.read_text())
    steps = [(r["step"], r["verdict"]) for r in saved["phases"]]
    assert [s for s, _ in steps] == ["steady"]  # nothing after the signal
    steady = saved["phases"][-1]
    assert steady["verdict"] == "fail" and "cancelled" in steady["reason"]
    assert "plan" in saved
    # The handlers are the defaults again once the run is over.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
