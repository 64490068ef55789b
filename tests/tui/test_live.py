"""Pilot tests against the real runner process (torch on CPU): keys only, end to end.

One runner per test; the campaigns are the fast demo with the phases other tests cover skipped.
"""

from __future__ import annotations

import os
import signal
import tomllib
from pathlib import Path

import psutil

from pilot_tui.core.verdict import FAIL
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.screens import ConfirmScreen, VariantForm
from pilot_tui.tui.state import RUNNING, WAITING

from .fake_nvml import NoDriverNvml
from .test_readable import screen_text
from .waiting import wait_for

SKIP = ["stack", "estimate", "machine", "inspect", "split", "overfit", "lr_run", "resume", "final"]


def gone(pid: int) -> bool:
    """The runner process no longer exists (or is a zombie nobody will reap: it is not)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def make_app(path: Path, tmp_path: Path) -> PilotApp:
    from pilot_tui.tui.nvml import NvmlProbe

    return PilotApp(path, records_dir=tmp_path / "records", nvml=NvmlProbe(NoDriverNvml()))


async def test_demo_end_to_end_with_keys(write_campaign, tmp_path: Path) -> None:
    path = write_campaign({"phases": {"skip": SKIP}})
    app = make_app(path, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to start")
        pid = app.source.runner_pid
        await pilot.press("n")
        await wait_for(pilot, lambda: app.gates["load"].finished, "load to finish")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.idle and all(g.finished for g in app.gates.values()), "every step")
        # Counters on CPU, at 80×24: the runner's pid and CPU %, system memory, the history's scale.
        await pilot.press("3")
        await wait_for(pilot, lambda: f"pid {pid}" in screen_text(app), "the runner's pid")
        text = screen_text(app)
        assert "% of one core" in text and "system memory" in text and " … █ " in text, text
        assert "runner ready in" in app.status_text
        await pilot.press("1")
        # The steady row, re-run as a new variant with a smaller microbatch, from the form. (The
        # cursor followed the running step to the last row: home goes back to the first.)
        await pilot.press("ctrl+home", "down", "down")
        assert app.selected_gate.key == "steady"
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, VariantForm), "the variant form")
        await pilot.press("1", "enter")
        # A memory variant is measured on its three phases, so it joins the comparison table.
        await wait_for(
            pilot,
            lambda: "eval_longest@v1" in app.gates and app.gates["eval_longest@v1"].finished,
            "the v1 variant's three phases",
        )
        await pilot.press("e")
        await wait_for(pilot, lambda: "plan" in app.sections, "the saved record")
        record = tomllib.loads(Path(app.record_path).read_text())
        steps = [row["step"] for row in record["phases"]]
        assert steps == [k for k in app.gates]  # one row per gate, in order, the v1 rows last
        assert steps[-3:] == ["first_step@v1", "steady@v1", "eval_longest@v1"]
        for row in record["phases"]:
            assert app.gates[row["step"]].status == row["verdict"]
            assert "peak_rss_mb" in row["memory"] and row["duration_s"] >= 0
        v1 = next(r for r in record["phases"] if r["step"] == "steady@v1")
        assert v1["variant"] == "v1" and v1["params"]["microbatch"] == 1
        entries = {v["id"]: v for v in record["variants"]}
        assert entries["v1"]["microbatch"] == 1
        assert entries["v1"]["effective_batch"] == entries["control"]["effective_batch"]
        assert "sheet" in record["plan"]
        await pilot.press("q")  # idle: quits without asking
    assert gone(pid)


async def test_cancel_mid_phase_then_quit_while_running(write_campaign, tmp_path: Path) -> None:
    path = write_campaign(
        {"phases": {"skip": [*SKIP, "save", "export"], "steady_updates": 2000}}, drop=("variants",)
    )
    app = make_app(path, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to start")
        pid = app.source.runner_pid
        await pilot.press("a")
        await wait_for(
            pilot,
            lambda: app.gates["steady"].status == RUNNING and app.gates["steady"].done > 0,
            "steady to run",
        )
        await pilot.press("c")
        await wait_for(pilot, lambda: "cancel" in app.gates["steady"].message, "steady to stop")
        # The record keeps the cancelled row; the step waits to run again under its own key.
        assert app.gates["steady"].status == WAITING
        assert app.gates["eval_longest"].status == WAITING  # the queue was dropped too
        saved = tomllib.loads(Path(app.record_path).read_text())
        assert saved["phases"][-1]["step"] == "steady" and saved["phases"][-1]["verdict"] == FAIL
        assert "cancel" in saved["phases"][-1]["reason"]
        # Same runner: `n` runs steady again (its own key, not a new variant); quit while it runs.
        assert app.source.runner_pid == pid
        await pilot.press("n")
        await wait_for(
            pilot,
            lambda: app.gates["steady"].status == RUNNING and app.gates["steady"].done > 0,
            "steady to run again",
        )
        await pilot.press("ctrl+q")  # asks, like q
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the quit question")
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")
    assert gone(pid)
    saved = tomllib.loads(Path(app.record_path).read_text())
    steady = [row for row in saved["phases"] if row["step"] == "steady"]
    assert len(steady) == 2 and all("cancel" in row["reason"] for row in steady)
    assert "in_flight" not in saved["campaign"]


async def test_a_cancel_while_a_dead_runner_restarts_still_stops_the_step(
    write_campaign, tmp_path: Path
) -> None:
    path = write_campaign(
        {"phases": {"skip": [*SKIP, "load", "first_step", "save", "export"], "steady_updates": 2000}},
        drop=("variants",),
    )
    app = make_app(path, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to start")
        first = app.source.runner_pid
        os.kill(first, signal.SIGKILL)
        await wait_for(pilot, lambda: gone(first), "the runner to die")
        await pilot.press("a")
        # Taken by the runner thread, which now waits for a new runner: a cancel sent before the phase
        # starts is dropped by that runner, so the runner thread sends it again when the phase starts.
        await wait_for(pilot, lambda: app.runner.current == "steady", "steady to be taken")
        await pilot.press("c")
        await wait_for(pilot, lambda: "cancel" in app.gates["steady"].message, "steady to stop")
        row = tomllib.loads(Path(app.record_path).read_text())["phases"][-1]
        assert row["verdict"] == FAIL and row["reason"] == "cancelled by the user", row["reason"]
        assert app.gates["eval_longest"].status == WAITING
        second = app.source.runner_pid
        assert second not in (None, first)
        await pilot.press("q")
        # Quit asks while the runner still finishes the cancel (a slow machine): the answer is yes.
        await wait_for(
            pilot, lambda: not app.is_running or isinstance(app.screen, ConfirmScreen), "quit or its question"
        )
        if app.is_running:
            await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")
    assert gone(second)


async def test_the_status_says_what_the_runner_does_while_it_opens(tmp_path: Path) -> None:
    # A task that takes seconds to build: the status line names that stage, with its seconds,
    # before the first row (the runner says each stage of the open: events.Opening).
    import tomli_w

    mistakes = Path(__file__).resolve().parent.parent / "data" / "mistakes"
    path = tmp_path / "campaign.toml"
    raw = {
        "campaign": {"name": "slow-open"},
        "task": {"file": str(mistakes / "slow_build.py"), "options": {"open_s": 4.0}},
        "batch": {"microbatch": 4, "accumulation": 1, "device": "cpu", "hold": "updates", "updates": 40},
    }
    path.write_text(tomli_w.dumps(raw))
    app = make_app(path, tmp_path)
    async with app.run_test(size=(120, 24)) as pilot:
        await wait_for(
            pilot,
            lambda: "opening the campaign: building the task" in app._status_line(),
            "the status to name the task's build",
        )
        assert "slow_build.py (its examples)" in app._status_line()
        await wait_for(pilot, lambda: app.runner.ready, "the runner to open the campaign")
        assert "opening the campaign" not in app._status_line()
