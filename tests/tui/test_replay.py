"""Pilot tests on the recorded demo stream (no runner): keys, gate rows, panes, read-only."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

from rich.console import Console
from textual.widgets import DataTable, Static

from pilot_tui.core.record import Record
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.state import RUNNING, WAITING

from .conftest import RECORD
from .waiting import wait_for


def all_done(app: PilotApp) -> bool:
    return app.idle and all(g.finished for g in app.gates.values())


def text_of(app: PilotApp, selector: str) -> str:
    """The plain text a Static shows (its Rich renderable printed without styles)."""
    console = Console(width=200, file=io.StringIO(), color_system=None)
    with console.capture() as capture:
        console.print(app.query_one(selector, Static).content)
    return capture.get()


async def test_keys_run_the_campaign_and_rows_follow_the_record(replay_app, tmp_path: Path) -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        first = next(iter(app.gates))
        assert all(g.status == WAITING for g in app.gates.values())
        await pilot.press("n")
        await wait_for(pilot, lambda: app.gates[first].finished, f"{first} to finish")
        assert sum(g.finished for g in app.gates.values()) == 1
        await pilot.press("a")
        await wait_for(pilot, lambda: all_done(app), "every step to finish")
        await wait_for(pilot, lambda: "plan" in app.sections, "the plan after the last step")
        # Every row on screen is the record's row, and the record on disk holds them all.
        saved = tomllib.loads(Path(app.record_path).read_text())
        by_step = {row["step"]: row for row in saved["phases"]}
        assert list(by_step) == list(app.gates)
        for key, gate in app.gates.items():
            assert gate.status == by_step[key]["verdict"]
        table = app.query_one("#gate-table", DataTable)
        assert table.row_count == len(app.gates)
        assert "plan" in saved and "sheet" in saved["plan"]


async def test_progress_is_drawn_while_a_step_runs(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        # A replayed PhaseProgress shows as a bar in the status cell (driven by the handler).
        from pilot_tui.core.events import PhaseProgress, PhaseStarted
        from pilot_tui.tui.messages import PhaseProgressMsg, PhaseStartedMsg

        app.post_message(PhaseStartedMsg(PhaseStarted(step="steady", phase="steady", variant="control")))
        app.post_message(PhaseProgressMsg(PhaseProgress(step="steady", done=2, total=4, loss=4.7)))
        await wait_for(pilot, lambda: app.gates["steady"].done == 2, "the progress event")
        assert app.gates["steady"].status == RUNNING
        await wait_for(
            pilot,
            lambda: "2/4" in str(app.query_one("#gate-table", DataTable).get_cell("steady", "status")),
            "the bar",
        )


async def test_panes_are_reachable_by_key_and_show_the_run(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: all_done(app), "every step to finish")
        for key, pane in zip("23451", ("batch", "counters", "board", "plan", "gates"), strict=True):
            await pilot.press(key)
            await wait_for(pilot, lambda pane=pane: app.tabs.active == pane, f"pane {pane}")
        await pilot.press("2")
        await wait_for(
            pilot, lambda: "supervised_tokens" in text_of(app, "#batch-body"), "the inspect checks"
        )
        await pilot.press("3")
        await wait_for(pilot, lambda: "H100" in text_of(app, "#nvml"), "the NVML table")
        await pilot.press("4")
        runs = app.query_one("#run-table", DataTable)
        await wait_for(pilot, lambda: runs.row_count == 3, "three LR runs on the board")
        await pilot.press("5")
        await wait_for(pilot, lambda: "Choice sheet" in text_of(app, "#plan-body"), "the choice sheet")


async def test_without_a_driver_the_counters_pane_says_why(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.nvml_snapshot is not None, "an NVML answer")
        await pilot.press("n", "n", "n", "n", "n")
        await wait_for(pilot, lambda: app.runner_counters is not None, "the runner's counters")
        await pilot.press("3")
        await wait_for(pilot, lambda: "driver not found" in text_of(app, "#nvml"), "the reason")
        assert "RSS" in text_of(app, "#runner")


async def test_quit_when_idle_needs_no_question(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")
    assert app.runner.done.is_set()


async def test_palette_lists_the_actions(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("ctrl+p")
        await pilot.press(*"run all")
        await pilot.press("enter")
        await wait_for(pilot, lambda: all_done(app), "the palette's run all")


async def test_saved_record_opens_read_only_with_every_pane(saved_record: Path) -> None:
    app = PilotApp(saved_record)
    before = saved_record.read_text()
    async with app.run_test(size=(80, 24)) as pilot:
        rows = Record.read(RECORD).phases
        assert [g.status for g in app.gates.values()] == [r["verdict"] for r in rows]
        assert "read-only" in app.sub_title
        await pilot.press("n", "a", "v", "c")  # run keys do nothing on a saved record
        assert all(g.finished for g in app.gates.values()) and not app.screen_stack[1:]
        await pilot.press("e")
        await pilot.press("4")
        await wait_for(pilot, lambda: app.query_one("#run-table", DataTable).row_count == 3, "the runs")
    assert saved_record.read_text() == before


async def test_notes_and_conclusion_on_a_saved_record(saved_record: Path) -> None:
    app = PilotApp(saved_record)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down", "down")  # the split row
        await pilot.press("o")
        await pilot.press(*"clean", "enter")
        await wait_for(pilot, lambda: "notes" in app.sections, "the note")
        await pilot.press("C")
        await pilot.press(*"kept", "enter", *"mb1", "enter")
        await wait_for(pilot, lambda: "conclusion" in app.sections, "the conclusion")
    data = tomllib.loads(saved_record.read_text())
    assert data["notes"][-1]["target"] == "split" and data["notes"][-1]["text"] == "clean"
    assert data["conclusion"] | {"time": ""} == {"text": "kept", "decision": "mb1", "time": ""}
    assert [r["step"] for r in data["phases"]] == [r["step"] for r in Record.read(RECORD).phases]


async def test_a_note_in_a_live_session_goes_into_its_record(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("n")
        first = next(iter(app.gates))
        await wait_for(pilot, lambda: app.gates[first].finished, f"{first} to finish")
        await pilot.press("o", *"fine", "enter")
        await wait_for(pilot, lambda: "notes" in app.sections, "the note")
        assert app.sections["notes"][-1]["target"] == first
        saved = tomllib.loads(Path(app.record_path).read_text())
        assert saved["notes"][-1]["text"] == "fine" and saved["phases"][0]["step"] == first
        await pilot.press("a")  # the steps after it keep the note: the session holds the record
        await wait_for(pilot, lambda: all_done(app), "every step to finish")
        await wait_for(pilot, lambda: "plan" in app.sections, "the plan")
    saved = tomllib.loads(Path(app.record_path).read_text())
    assert [n["text"] for n in saved["notes"]] == ["fine"] and "plan" in saved
