"""Snapshots of every pane at 80×24 and 120×40, from the recorded demo (no live numbers).

Regenerate after a deliberate change: `pytest tests/tui/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from pilot_tui.tui.app import PilotApp

from .waiting import wait_for

PANES = {"gates": "1", "batch": "2", "counters": "3", "board": "4", "plan": "5"}
SIZES = [(80, 24), (120, 40)]


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
        await pilot.press(key)
        await wait_for(pilot, lambda: not app.dirty & {app.tabs.active}, "the pane to be drawn")
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", list(PANES))
def test_pane(snap_compare, replay_app, pane: str, size: tuple[int, int]) -> None:
    app = replay_app()
    assert snap_compare(app, terminal_size=size, run_before=replayed_to_the_end(app, PANES[pane]))
