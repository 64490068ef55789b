"""One line per rank for a phase that ran on several (R22): the Gates detail and the Counters pane.

Pure rendering from a row's `ranks` entries (plain dicts from the record); no torch, no widget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ..core.rows import Memory

BAR = 12  # characters of the widest rank's memory bar
STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def rank_peak(entry: Mapping[str, Any]) -> tuple[str, float | None]:
    """The figure a rank's memory is judged by: peak reserved on CUDA, peak RSS on CPU."""
    memory = Memory.from_toml(entry)  # rows.Memory decides which counter
    value = memory.peak()
    if value is None:
        return "peak", None
    return memory.peak_name.removesuffix("_mb").replace("_", " ").replace("rss", "RSS"), value


def _bar(value: float | None, top: float) -> str:
    if value is None or top <= 0:
        return ""
    filled = round(BAR * value / top)
    return "█" * filled + "·" * (BAR - filled)


def rank_table(ranks: Sequence[Mapping[str, Any]]) -> Table:
    """rank · verdict · peak memory with a bar scaled to the worst rank · NVML · step time ·
    data wait · this rank's own state · reason."""
    table = Table(box=None, padding=(0, 1), show_header=True, header_style="bold")
    for name in ("rank", "verdict", "peak", "", "nvml used", "step", "data wait", "state", "reason"):
        table.add_column(name, no_wrap=name != "reason")
    peaks = [rank_peak(r)[1] for r in ranks]
    top = max((p for p in peaks if p is not None), default=0.0)
    for entry, peak in zip(ranks, peaks, strict=True):
        verdict = str(entry.get("verdict", ""))
        step = entry.get("step_time_s")
        wait = entry.get("data_wait_share")
        state = entry.get("state_mb")
        nvml = entry.get("nvml_used_mb")
        # Several nodes: which machine the rank is on ("node 1 · 3"), the first thing to look at.
        who = str(entry.get("rank", "?"))
        if "node" in entry:
            who = f"node {entry['node']} · {who}"
        table.add_row(
            who,
            Text(verdict, style=STYLES.get(verdict, "")),
            f"{peak:.1f} MiB" if peak is not None else "n/a",
            Text(_bar(peak, top), style="red" if peak == top and len(ranks) > 1 else "cyan"),
            f"{nvml:.0f} MiB" if isinstance(nvml, int | float) else "",
            f"{step * 1e3:.1f} ms" if isinstance(step, int | float) else "",
            f"{wait:.0%}" if isinstance(wait, int | float) else "",
            f"{state:.1f} MiB" if isinstance(state, int | float) else "",
            Text(str(entry.get("reason", "")), style=STYLES.get(verdict, "")),
        )
    return table


def latest_ranks(rows: Sequence[Mapping[str, Any]]) -> tuple[str, list[Mapping[str, Any]]]:
    """(step key, ranks) of the last row that ran on several ranks, else ("", [])."""
    for row in reversed(rows):
        ranks = row.get("ranks")
        if isinstance(ranks, list) and ranks:
            return str(row.get("step", "")), ranks
    return "", []
