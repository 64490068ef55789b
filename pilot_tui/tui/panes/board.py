"""Board pane: the LR runs side by side — table and loss curves — and the memory variants."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from ... import board
from ...rows import PEAK_KEYS, Memory
from ..state import fmt_value

RUN_COLUMNS = ("run", "lr", "seed", "status", "stop", "last loss", "best val")
STATUS_STYLE = {"running": "bold cyan", "done": "green", "completed": "green", "stopped": "yellow"}


def last_loss(run: dict[str, Any]) -> float | None:
    losses = run.get("losses") or []
    return losses[-1] if losses else None


def best_validation(run: dict[str, Any]) -> float | None:
    if isinstance(run.get("best_validation"), int | float):
        return run["best_validation"]
    best = board.best_validation(run.get("validation") or [])  # a live run: same rule as its row
    return best[0] if best else None


def run_cells(run: dict[str, Any]) -> tuple[Any, ...]:
    status = str(run.get("status", ""))
    stop = run.get("stop_cause", "") or ""
    if stop and run.get("stop_step") is not None:
        stop = f"{stop} @{run['stop_step']}"
    return (
        str(run.get("id", "?")),
        fmt_value(run.get("lr", "")),
        str(run.get("seed", "")),
        Text(status, style=STATUS_STYLE.get(status, "red" if "fail" in status or "diverg" in status else "")),
        stop,
        fmt_value(last_loss(run)) if last_loss(run) is not None else "—",
        fmt_value(best_validation(run)) if best_validation(run) is not None else "—",
    )


# (header, record keys tried in order); a column shows only when some variant has it.
VARIANT_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("variant", ("id",)),
    ("mb×acc", ("microbatch",)),
    ("len", ("max_length",)),
    ("prec", ("precision",)),
    ("ckpt", ("activation_checkpointing",)),
    ("verdict", ("verdict",)),
    ("peak", PEAK_KEYS),
    ("peak ×", ("peak_reserved_ratio", "peak_rss_ratio", "peak_ratio")),
    ("step ×", ("step_time_ratio",)),
    ("question", ("changes_question",)),
)


def _variant_cell(header: str, keys: tuple[str, ...], v: dict[str, Any]) -> Text:
    # A variant entry carries the same peak counters as a row: rows.Memory picks the figure.
    value = Memory.from_toml(v).peak() if header == "peak" else next((v[k] for k in keys if k in v), None)
    if value is None:
        return Text("—" if header != "variant" else "?", style="dim")
    if header == "mb×acc":
        return Text(f"{value}×{v.get('accumulation', '?')}")
    if header == "ckpt":
        return Text("on" if value else "off")
    if header == "peak":
        return Text(f"{value:,.0f} MiB" if isinstance(value, int | float) else str(value))
    if header in ("peak ×", "step ×"):
        return Text(f"{value:.2f}" if isinstance(value, int | float) else str(value))
    if header == "question":
        return Text("CHANGED", style="bold yellow") if value else Text("same")
    if header == "verdict":
        return Text(
            str(value), style={"pass": "green", "warn": "yellow", "fail": "bold red"}.get(str(value), "")
        )
    return Text(fmt_value(value))


def variants_table(variants: list[dict[str, Any]]) -> Table:
    """The memory variants beside the control: peak and step time as ratios, same question or not."""
    table = Table(title="memory variants vs control", box=None, padding=(0, 1), title_justify="left")
    columns = [(h, keys) for h, keys in VARIANT_COLUMNS if any(k in v for v in variants for k in keys)]
    for header, _ in columns:
        table.add_column(header, no_wrap=True)
    for v in variants:
        table.add_row(*(_variant_cell(h, keys, v) for h, keys in columns))
    return table


class BoardPane(Vertical):
    """LR runs table, their loss curves (train solid, validation marked), and memory variants."""

    can_focus = True  # so the tab can hold focus before any run exists

    def compose(self) -> ComposeResult:
        yield Static("No LR runs yet: they appear here when the lr_run steps run.", id="board-empty")
        yield DataTable(id="run-table", cursor_type="row", zebra_stripes=True)
        yield PlotextPlot(id="loss-plot")
        yield Static(id="variants")

    def on_mount(self) -> None:
        table = self.query_one("#run-table", DataTable)
        for name in RUN_COLUMNS:
            table.add_column(name, key=name)
        self._runs: list[dict[str, Any]] = []
        plt = self.query_one(PlotextPlot).plt
        plt.title("loss per update")

    def show(self, runs: list[dict[str, Any]], variants: list[dict[str, Any]]) -> None:
        """Redraw from the merged runs (record rows + live points), at most ~10×/s."""
        table = self.query_one("#run-table", DataTable)
        self.query_one("#board-empty").display = not runs
        table.display = bool(runs)
        self.query_one(PlotextPlot).display = bool(runs)
        for run in runs:
            key = str(run.get("id"))
            cells = run_cells(run)
            if key not in table.rows:
                table.add_row(*cells, key=key)
            else:
                for column, value in zip(table.columns, cells, strict=True):
                    table.update_cell(key, column, value)
        if runs != self._runs:
            self._plot(runs)
            self._runs = runs
        self.query_one("#variants", Static).update(variants_table(variants) if variants else "")

    def _plot(self, runs: list[dict[str, Any]]) -> None:
        widget = self.query_one(PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        for run in runs:
            losses = [x for x in run.get("losses") or [] if isinstance(x, int | float)]
            if losses:
                plt.plot(list(range(1, len(losses) + 1)), losses, label=str(run.get("id")), marker="braille")
            points = [p for p in run.get("validation") or [] if isinstance(p, dict) and "loss" in p]
            if points:
                plt.scatter([p.get("update", 0) for p in points], [p["loss"] for p in points], marker="x")
        widget.refresh()
