"""Snapshots of every pane at 80×24 and 120×40, from the recorded demo (no live numbers): the
finished campaign, and mid-run frames (a step running, an LR run training on the Board).

Regenerate after a deliberate change: `pytest tests/tui/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from pilot_tui.core.events import PhaseProgress, PhaseStarted, RunUpdate
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.messages import PhaseProgressMsg, PhaseStartedMsg, RunUpdateMsg

from .waiting import wait_for

PANES = {"gates": "1", "batch": "2", "counters": "3", "board": "4", "plan": "5"}
SIZES = [(80, 24), (120, 40)]
LIVE_RUN = "lr_run@lr2e-4-s0"


def replayed_to_the_end(app: PilotApp, key: str):
    async def run_before(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.runner.ready, "the replay to start")
        await pilot.press("a")
        await wait_for(
            pilot,
            lambda: app.idle and all(g.finished for g in app.gates.values()) and "plan" in app.sections,
            "the replay to finish",
        )
        await wait_for(pilot, lambda: app.nvml_snapshot is not None, "an NVML sample")
        # The cursor followed the running steps as far as the redraws saw them (timing): put it
        # on the first row, so the frame is the same on every machine.
        await pilot.press("ctrl+home", key)
        await wait_for(pilot, lambda: not app.dirty & {app.tabs.active}, "the pane to be drawn")
        await wait_for(pilot, lambda: not app.board_pane.plot_pending, "the curves, a frame after")
        await pilot.pause()

    return run_before


def stopped_mid_run(app: PilotApp, key: str):
    """Every step before the last LR run replayed; that run then trains (events posted by hand)."""

    async def run_before(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.runner.ready, "the replay to start")
        keys = list(app.gates)
        before = keys[: keys.index(LIVE_RUN)]
        app.queue_steps(before)
        await wait_for(pilot, lambda: app.idle and all(app.gates[k].finished for k in before), "the steps")
        await wait_for(pilot, lambda: app.nvml_snapshot is not None, "an NVML sample")
        app.gates_pane.clock = lambda: 1000.0
        app.post_message(PhaseStartedMsg(PhaseStarted(step=LIVE_RUN, phase="lr_run", variant="lr2e-4-s0")))
        await wait_for(pilot, lambda: LIVE_RUN in app.started, "the LR run to start")
        app.started[LIVE_RUN] = 1000.0 - 7.2
        app.post_message(PhaseProgressMsg(PhaseProgress(step=LIVE_RUN, done=66, total=1500, loss=4.71)))
        for update in range(1, 67):
            loss = 5.0 - 0.004 * update + (0.03 if update % 7 == 0 else 0.0)
            app.post_message(RunUpdateMsg(RunUpdate("lr2e-4-s0-1", update, loss, None, "running")))
        await wait_for(pilot, lambda: app.gates[LIVE_RUN].done == 66, "the progress")
        await wait_for(pilot, lambda: len(app.live_runs["lr2e-4-s0-1"]["losses"]) == 66, "the live points")
        await pilot.press(key)
        await wait_for(pilot, lambda: app.tabs.active == ("gates" if key == "1" else "board"), "the pane")
        app.urgent.add(app.tabs.active)
        await wait_for(pilot, lambda: not app.dirty & {app.tabs.active}, "the pane to be drawn")
        await pilot.pause(0.6)  # the curve waits for its half-second slot
        await wait_for(pilot, lambda: not app.board_pane.plot_pending, "the curves, a frame after")
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", list(PANES))
def test_pane(snap_compare, replay_app, pane: str, size: tuple[int, int]) -> None:
    app = replay_app()
    assert snap_compare(app, terminal_size=size, run_before=replayed_to_the_end(app, PANES[pane]))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", ["gates", "board"])
def test_mid_run(snap_compare, replay_app, pane: str, size: tuple[int, int]) -> None:
    app = replay_app()
    assert snap_compare(app, terminal_size=size, run_before=stopped_mid_run(app, PANES[pane]))


async def test_the_curves_follow_the_plot_width(replay_app) -> None:
    """Curves are downsampled to the plot's width: a resized terminal builds them again, so a
    frame never shows curves cut for another width (a scrollbar coming or going changes it too)."""
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await replayed_to_the_end(app, "4")(pilot)
        board = app.board_pane
        wide = board.plotted_width
        assert wide is not None and wide > 60
        await pilot.resize_terminal(90, 40)
        await wait_for(pilot, lambda: board.plotted_width not in (None, wide), "the curves rebuilt")
        await wait_for(pilot, lambda: not board.plot_pending, "the new curves drawn")
        assert board.plotted_width == max(board.query_one("#loss-plot").size.width - 8, 10) < wide
