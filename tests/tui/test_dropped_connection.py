"""SIGTERM / SIGHUP to the dashboard: the running step ends, the record is saved, exit 128 + n."""

from __future__ import annotations

import signal
import tomllib
from pathlib import Path

from .waiting import wait_for


async def test_sigterm_stops_the_dashboard_after_saving_the_record(replay_app) -> None:
    app = replay_app()
    app.source.link.delay_s = 0.01  # events spaced out, so steps are still queued at the signal
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: any(g.finished for g in app.gates.values()), "a first row")
        # What the loop's signal handler calls (a real signal would reach pytest's own loop too).
        app._on_stop_signal(signal.SIGTERM)
        await pilot.pause()
    assert app.return_value == 128 + signal.SIGTERM
    assert app.runner.done.is_set()  # the runner worker finished: the session is closed
    saved = tomllib.loads(Path(app.record_path).read_text())
    finished = [g.key for g in app.gates.values() if g.finished]
    # Every row the dashboard showed is on disk, and nothing queued ran after the signal.
    assert [r["step"] for r in saved["phases"]][: len(finished)] == finished
    assert len(saved["phases"]) < len(app.gates)


async def test_continue_shows_the_recorded_rows_and_runs_only_the_rest(tmp_path: Path) -> None:
    """`open RECORD --continue`: recorded steps show their rows; `a` queues only the others."""
    from pilot_tui.core.record import Record
    from pilot_tui.session.driver import replay_session
    from pilot_tui.tui.app import PilotApp
    from pilot_tui.tui.nvml import NvmlProbe

    from .conftest import CAMPAIGN, RECORD, RECORDING
    from .fake_nvml import NoDriverNvml

    source = replay_session(CAMPAIGN, RECORDING, records_dir=tmp_path / "records")
    saved = Record.read(RECORD)
    done = saved.phases[:3]
    # The last recorded step was interrupted: it runs again.
    interrupted = dict(saved.phases[3], verdict="fail", reason="cancelled by the user")
    saved.data["phases"] = [*done, interrupted]
    source.record = saved  # as continue_session hands it over
    app = PilotApp(source=source, nvml=NvmlProbe(NoDriverNvml()))
    assert [g.status for g in list(app.gates.values())[:3]] == [r["verdict"] for r in done]
    pending = [s.key for s in source.steps_to_run()]
    assert interrupted["step"] in pending and not {r["step"] for r in done} & set(pending)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        waiting = [k for k, g in app.gates.items() if not g.finished]
        assert waiting == pending
