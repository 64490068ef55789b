"""Per-rank lines (R22) in a saved record: the Gates detail of a phase run on 2 ranks, and the
Counters pane's ranks section (hidden for a one-process record)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
from rich.console import Console
from textual.widgets import DataTable, Static

from pilot_tui.tui.app import PilotApp

from .waiting import wait_for

RANKS = [
    {
        "rank": 0,
        "verdict": "pass",
        "duration_s": 0.2,
        "peak_rss_mb": 300.0,
        "step_time_s": 0.041,
        "data_wait_share": 0.02,
    },
    {
        "rank": 1,
        "verdict": "warn",
        "duration_s": 0.3,
        "peak_rss_mb": 450.0,
        "step_time_s": 0.05,
        "reason": "slow",
    },
]


def text_of(widget: Static) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


async def test_gate_detail_and_counters_show_one_line_per_rank(saved_record: Path) -> None:
    data = tomllib.loads(saved_record.read_text())
    index = next(i for i, r in enumerate(data["phases"]) if r["step"] == "steady")
    data["phases"][index]["ranks"] = RANKS
    saved_record.write_text(tomli_w.dumps(data))
    app = PilotApp(saved_record)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one("#gate-table", DataTable)
        keys = [str(k.value) for k in table.rows]
        table.move_cursor(row=keys.index("steady"))
        detail = app.query_one("#gate-detail", Static)
        await wait_for(pilot, lambda: "ranks (2)" in text_of(detail), "the steady row's ranks")
        lines = [ln for ln in text_of(detail).splitlines() if "MiB" in ln and ("pass" in ln or "warn" in ln)]
        assert len(lines) == 2 and "450.0 MiB" in lines[1] and "slow" in lines[1]
        await pilot.press("3")
        ranks = app.query_one("#ranks", Static)
        await wait_for(pilot, lambda: ranks.display and "450.0 MiB" in text_of(ranks), "the counters' ranks")
        assert "steady" in text_of(app.query_one("#ranks-label", Static))
