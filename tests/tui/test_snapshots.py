"""Snapshots of every pane at 80×24 and 120×40, from the recorded demo (no live numbers): the
finished campaign, and mid-run frames (a step running, an LR run training on the Board).

Regenerate after a deliberate change: `pytest tests/tui/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_textual_snapshot import SVGImageExtension
from textual.pilot import Pilot

from pilot_tui.analysis.plan import rental
from pilot_tui.core.events import PhaseProgress, PhaseStarted, RunUpdate
from pilot_tui.session.driver import replay_session
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.messages import PhaseProgressMsg, PhaseStartedMsg, RunUpdateMsg
from pilot_tui.tui.nvml import NvmlProbe

from .conftest import CAMPAIGN, RECORDING
from .fake_nvml import FakeNvml
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
        await switched_to(app, key)(pilot)

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
        await live_switch(app, key)(pilot)

    return run_before


async def _frame(pilot: Pilot) -> str:
    """The screenshot as `snap_compare` takes it (textual._doc.take_svg_screenshot)."""
    await pilot.pause()
    await pilot.press()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    return pilot.app.export_screenshot(title=pilot.app.title, simplify=True)


def _frames(app: PilotApp, size: tuple[int, int], keys: list[str], reach) -> dict[str, str]:
    """One replay, then a frame of each pane in turn: a replay costs seconds, a frame does not.
    Each pane is shown after the ones before it, so a frame also checks that a switch leaves
    nothing of the pane it left."""
    frames: dict[str, str] = {}

    async def auto_pilot(pilot: Pilot) -> None:
        for key in keys:
            await reach(app, key)(pilot)
            frames[key] = await _frame(pilot)
        app.exit()

    app.run(headless=True, auto_pilot=auto_pilot, size=size)
    return frames


def again(step, switch=None):
    """A `run_before` that, after its first pane, only switches (the replay already ran)."""
    done: list[str] = []

    def reach(app: PilotApp, key: str):
        if not done:
            done.append(key)
            return step(app, key)
        return (switch or switched_to)(app, key)

    return reach


def live_switch(app: PilotApp, key: str):
    """To a pane while the LR run of `stopped_mid_run` trains."""

    async def run_before(pilot: Pilot) -> None:
        await pilot.press(key)
        await wait_for(pilot, lambda: app.tabs.active == ("gates" if key == "1" else "board"), "the pane")
        app.urgent.add(app.tabs.active)
        await wait_for(pilot, lambda: not app.dirty & {app.tabs.active}, "the pane to be drawn")
        await pilot.pause(0.6)  # the curve waits for its half-second slot
        await wait_for(pilot, lambda: not app.board_pane.plot_pending, "the curves, a frame after")
        await pilot.pause()

    return run_before


def switched_to(app: PilotApp, key: str):
    """To a pane of the finished replay, its cursor on the first row (the same on every machine)."""

    async def run_before(pilot: Pilot) -> None:
        await pilot.press("ctrl+home", key)
        await wait_for(pilot, lambda: not app.dirty & {app.tabs.active}, "the pane to be drawn")
        await wait_for(pilot, lambda: not app.board_pane.plot_pending, "the curves, a frame after")
        await pilot.pause()

    return run_before


@pytest.fixture(scope="module")
def demo_app() -> Iterator[Callable[[], PilotApp]]:
    """demo_app() -> the recorded demo replayed, its records in a new folder. The Plan names that
    folder and the free space there (the disk check) below its first screen: a path or a figure
    of another length wraps to other lines and moves the scroll bar, so every folder's path has
    the same length wherever pytest runs, and the free space is a fixed 100 GiB (the disk is this
    machine's, not the replay's)."""
    base = Path(tempfile.mkdtemp(prefix="pt-snap-", dir="/tmp"))
    pinned = pytest.MonkeyPatch()
    pinned.setattr(rental, "free_bytes", lambda folder: 100 * 2**30)

    def make() -> PilotApp:
        records = Path(tempfile.mkdtemp(prefix="r", dir=base)) / "records"
        source = replay_session(CAMPAIGN, RECORDING, records_dir=records)
        return PilotApp(source=source, nvml=NvmlProbe(FakeNvml()))

    yield make
    pinned.undo()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def finished(demo_app) -> dict[tuple[int, int], dict[str, str]]:
    """Per terminal size, every pane's frame of the finished replay."""
    # The Plan first: its frame is the one a replay's end draws (its scroll bar as first laid out).
    keys = [PANES["plan"], *(k for p, k in PANES.items() if p != "plan")]
    return {size: _frames(demo_app(), size, keys, again(replayed_to_the_end)) for size in SIZES}


@pytest.fixture(scope="module")
def mid_run(demo_app) -> dict[tuple[int, int], dict[str, str]]:
    """Per terminal size, the Gates and Board frames while an LR run trains."""
    keys = [PANES["gates"], PANES["board"]]
    return {size: _frames(demo_app(), size, keys, again(stopped_mid_run, live_switch)) for size in SIZES}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", list(PANES))
def test_pane(snapshot, finished, pane: str, size: tuple[int, int]) -> None:
    assert snapshot.use_extension(SVGImageExtension) == finished[size][PANES[pane]]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", ["gates", "board"])
def test_mid_run(snapshot, mid_run, pane: str, size: tuple[int, int]) -> None:
    assert snapshot.use_extension(SVGImageExtension) == mid_run[size][PANES[pane]]


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
