"""The per-rank lines of the Gates detail and the Counters pane (R22): pure rendering."""

from __future__ import annotations

from rich.console import Console

from pilot_tui.core.rows import PhaseRow, RankRow
from pilot_tui.tui.ranks import latest_ranks, rank_table

RANKS = [
    {
        "rank": 0,
        "verdict": "pass",
        "duration_s": 0.2,
        "peak_rss_mb": 300.0,
        "step_time_s": 0.041,
        "data_wait_share": 0.02,
        "state_mb": 1.8,
    },
    {"rank": 1, "verdict": "fail", "duration_s": 0.3, "peak_rss_mb": 450.0, "reason": "killed by SIGKILL"},
]


def render(table) -> list[str]:
    console = Console(width=140, record=True, color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def test_one_line_per_rank_with_its_own_figures_and_a_bar_scaled_to_the_worst():
    lines = render(rank_table([RankRow.from_toml(r) for r in RANKS]))
    assert "rank" in lines[0] and "peak" in lines[0] and "data wait" in lines[0]
    r0, r1 = lines[1], lines[2]
    assert r0.split()[:2] == ["0", "pass"] and "300.0 MiB" in r0 and "41.0 ms" in r0 and "2%" in r0
    assert r1.split()[:2] == ["1", "fail"] and "450.0 MiB" in r1 and "killed by SIGKILL" in r1
    # The bar is scaled to the rank with the highest peak: full for rank 1, 2/3 for rank 0.
    assert r1.count("█") == 12 and r0.count("█") == 8


def test_latest_ranks_is_the_last_row_run_on_several_ranks():
    rows = [
        PhaseRow.from_toml(r)
        for r in (
            {"step": "load", "ranks": RANKS},
            {"step": "inspect"},
            {"step": "steady", "ranks": RANKS[:1]},
            {"step": "x"},
        )
    ]
    assert latest_ranks(rows) == ("steady", (RankRow.from_toml(RANKS[0]),))
    assert latest_ranks(rows[1:2]) == ("", ())


def test_headless_prints_one_indented_line_per_rank_and_none_for_one_process():
    from pilot_tui.commands.headless import rank_lines

    lines = rank_lines({"ranks": RANKS})
    assert lines == [
        "      rank 0: pass · peak RSS 300.0 MiB · step 41.0 ms",
        "      rank 1: fail · peak RSS 450.0 MiB · killed by SIGKILL",
    ]
    assert rank_lines({"step": "load"}) == []
