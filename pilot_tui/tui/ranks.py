"""One line per rank for a phase that ran on several (R22): the Gates detail and the Counters pane.

Pure rendering from a row's typed rank entries (`core.rows.RankRow`); no torch, no widget.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from ..core.rows import PhaseRow, RankRow

BAR = 12  # characters of the widest rank's memory bar
STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def rank_peak(entry: RankRow) -> tuple[str, float | None]:
    """The figure a rank's memory is judged by: peak reserved on CUDA, peak RSS on CPU."""
    value = entry.memory.peak()  # rows.Memory decides which counter
    if value is None:
        return "peak", None
    return entry.memory.peak_name.removesuffix("_mb").replace("_", " ").replace("rss", "RSS"), value


def _bar(value: float | None, top: float) -> str:
    if value is None or top <= 0:
        return ""
    filled = round(BAR * value / top)
    return "█" * filled + "·" * (BAR - filled)


def rank_table(ranks: Sequence[RankRow]) -> Table:
    """rank · verdict · peak memory with a bar scaled to the worst rank · NVML · step time ·
    data wait · this rank's own state · reason."""
    table = Table(box=None, padding=(0, 1), show_header=True, header_style="bold")
    for name in ("rank", "verdict", "peak", "", "nvml used", "step", "data wait", "state", "reason"):
        table.add_column(name, no_wrap=name != "reason")
    peaks = [rank_peak(r)[1] for r in ranks]
    top = max((p for p in peaks if p is not None), default=0.0)
    for entry, peak in zip(ranks, peaks, strict=True):
        style = STYLES.get(entry.verdict, "")
        nvml, step, wait, state = entry.nvml_used_mb, entry.step_time_s, entry.data_wait_share, entry.state_mb
        # Several nodes: which machine the rank is on ("node 1 · 3"), the first thing to look at.
        who = "?" if entry.rank is None else str(entry.rank)
        if entry.node is not None:
            who = f"node {entry.node} · {who}"
        table.add_row(
            who,
            Text(entry.verdict, style=style),
            f"{peak:.1f} MiB" if peak is not None else "n/a",
            Text(_bar(peak, top), style="red" if peak == top and len(ranks) > 1 else "cyan"),
            f"{nvml:.0f} MiB" if nvml is not None else "",
            f"{step * 1e3:.1f} ms" if step is not None else "",
            f"{wait:.0%}" if wait is not None else "",
            f"{state:.1f} MiB" if state is not None else "",
            Text(entry.reason, style=style),
        )
    return table


def latest_ranks(rows: Sequence[PhaseRow]) -> tuple[str, tuple[RankRow, ...]]:
    """(step key, ranks) of the last row that ran on several ranks, else ("", ())."""
    for row in reversed(rows):
        if row.ranks:
            return row.recorded_key or row.key, row.ranks
    return "", ()
