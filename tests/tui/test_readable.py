"""At 80×24: what a person sees — running row in view, whole counters, the board's
decision, the plan as `pilot-tui plan` prints it, notes, quit questions, an interrupted record's
banner, and no record file before a step runs. All on the recorded demo (no runner)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
from textual.widgets import DataTable

from pilot_tui.analysis.plan import compute_plan, spec_of
from pilot_tui.core.events import PhaseProgress, PhaseStarted
from pilot_tui.core.steps import campaign_steps
from pilot_tui.session.driver import replay_session
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.messages import PhaseProgressMsg, PhaseStartedMsg
from pilot_tui.tui.nvml import NvmlProbe
from pilot_tui.tui.screens import ConfirmScreen
from pilot_tui.tui.state import RUNNING

from .conftest import CAMPAIGN, RECORD, RECORDING
from .fake_nvml import NoDriverNvml
from .waiting import wait_for

SIZE = (80, 24)


def screen_text(app: PilotApp) -> str:
    """The characters on the terminal now, one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def all_done(app: PilotApp) -> bool:
    return app.idle and all(g.finished for g in app.gates.values()) and "plan" in app.sections


async def test_gates_follow_the_running_step_and_keep_counters_whole(replay_app) -> None:
    app = replay_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        last = list(app.gates)[-1]  # far below the first screenful at 80×24
        app.post_message(PhaseStartedMsg(PhaseStarted(step=last, phase="final", variant="control")))
        app.post_message(PhaseProgressMsg(PhaseProgress(step=last, done=66, total=1500)))
        await wait_for(pilot, lambda: app.gates[last].done == 66, "the progress event")
        label = app.gates[last].label
        await wait_for(pilot, lambda: label in screen_text(app), "the running row on screen")
        line = next(x for x in screen_text(app).splitlines() if label in x)
        assert "▶" in line and "66/1500" in line, line  # the counter is never cut
        assert app.gates[last].status == RUNNING
        # The detail box is one line at 24 rows, and `d` opens the selected step's details.
        assert app.gates_pane.collapsed
        await pilot.press("d")
        await wait_for(
            pilot, lambda: "params" in screen_text(app) or "not run" in screen_text(app), "details"
        )


async def test_board_decision_plan_caveats_and_notes_at_80x24(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: all_done(app), "the replay to finish")
        await pilot.press("4")
        await wait_for(pilot, lambda: "decision:" in screen_text(app), "the board's decision")
        board = tomllib.loads(Path(app.record_path).read_text())["board"]
        assert board["decision"].split()[0] in screen_text(app)
        # One name per run: the run table says lr1e-4-s0, as Gates' `lr_run [lr1e-4-s0]` does.
        runs = app.query_one("#run-table", DataTable)
        names = [str(runs.get_row_at(i)[0]) for i in range(runs.row_count)]
        assert "lr1e-4-s0" in names and not any(n.endswith("-1") for n in names)
        await pilot.press("5")
        await wait_for(pilot, lambda: "Choice sheet" in screen_text(app), "the plan")
        text = screen_text(app)
        # Caveats first: the CPU measurement and what the memory figure is, in its first words.
        assert text.index("measured on the CPU") < text.index("Choice sheet")
        assert "runner process peak RSS on CPU — not GPU memory" in text
        await pilot.press("1", "o", *"looks right", "enter")
        await wait_for(pilot, lambda: "notes" in app.sections, "the note")
        target = app.sections["notes"][-1]["target"]
        await wait_for(pilot, lambda: "✎" in screen_text(app), "the note mark on its step")
        await pilot.press("5", "end")
        await wait_for(pilot, lambda: "looks right" in screen_text(app), "the notes list")
        assert target in screen_text(app)


async def test_q_and_ctrl_q_both_ask_while_a_phase_runs(tmp_path: Path) -> None:
    source = replay_session(
        CAMPAIGN, RECORDING, records_dir=tmp_path, delay_s=0.05
    )  # the run must outlast two questions
    app = PilotApp(source=source, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.runner.busy, "a step to run")
        for key in ("q", "ctrl+q"):
            await pilot.press(key)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), f"the question after {key}")
            await pilot.press("n")
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the answer")
            assert app.is_running
        await pilot.press("ctrl+q", "y")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")


async def test_no_record_file_until_the_first_step_runs(tmp_path: Path) -> None:
    records = tmp_path / "records"
    source = replay_session(CAMPAIGN, RECORDING, records_dir=records)
    app = PilotApp(source=source, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")
    assert not list(records.glob("*.toml"))  # opened and quit: nothing written
    source = replay_session(CAMPAIGN, RECORDING, records_dir=records)
    app = PilotApp(source=source, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("n")
        first = next(iter(app.gates))
        await wait_for(pilot, lambda: app.gates[first].finished, "the first step")
    [path] = records.glob("*.toml")
    saved = tomllib.loads(path.read_text())
    assert [r["step"] for r in saved["phases"]] == [first] and "in_flight" not in saved["campaign"]


async def test_an_interrupted_record_says_so_and_gets_a_provisional_plan(tmp_path: Path) -> None:
    data = tomllib.loads(RECORD.read_text())
    data["phases"] = data["phases"][:7]  # stopped during the 8th step
    in_flight = tomllib.loads(RECORD.read_text())["phases"][7]["step"]
    data["campaign"]["in_flight"] = in_flight
    for section in ("plan", "runs", "board", "variants", "artifacts"):
        data.pop(section, None)
    path = tmp_path / "interrupted.toml"
    path.write_text(tomli_w.dumps(data))
    app = PilotApp(path, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=SIZE) as pilot:
        text = screen_text(app)
        planned = len(campaign_steps(spec_of(data)))  # the record's own spec says what was planned
        assert f"INTERRUPTED: 7 of {planned} planned steps done" in text
        assert f"{in_flight} was running" in text
        await pilot.press("5")
        await wait_for(pilot, lambda: "PROVISIONAL" in screen_text(app), "the provisional plan")


async def test_the_plan_pane_shows_where_each_configuration_s_days_go(tmp_path: Path) -> None:
    """A record whose [plan] has the whole rental: the pane reads it back typed and draws its lines."""
    data = tomllib.loads(RECORD.read_text())
    data["plan"] = compute_plan(data, record_dir=tmp_path).as_toml()
    path = tmp_path / "rental.toml"
    path.write_text(tomli_w.dumps(data))
    app = PilotApp(path, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=(160, 200)) as pilot:
        await pilot.press("5")
        await wait_for(pilot, lambda: "Package plan" in screen_text(app), "the plan")
        text = screen_text(app)
        assert "control: [SSS" in text and "restarts" in text
        assert "disk                pass" in text or "disk pass" in " ".join(text.split())
        assert "tokens/s (non-padding)" in text
    # The recorded demo's [plan] is older still (no blocked_by): not read into made-up figures,
    # shown as it is.
    path.write_text(RECORD.read_text())
    app = PilotApp(path, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=(160, 200)) as pilot:
        await pilot.press("5")
        await wait_for(pilot, lambda: "Rental package" in screen_text(app), "the older plan, as it is")
        assert "restart(s)" not in screen_text(app)
