"""Board pane: the LR runs side by side — table and loss curves — and the memory variants."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from ...analysis import board
from ...analysis.board import parse_run_name, split_run_id
from ...core import dimensions
from ...core.rows import PEAK_KEYS, Memory, RunRow
from ..focus import RestyleSelfOnFocus
from ..state import fmt_value

RUN_COLUMNS = ("run", "lr", "seed", "status", "stop", "last loss", "best val")
STATUS_STYLE = {"running": "bold cyan", "done": "green", "completed": "green", "stopped": "yellow"}


def last_loss(run: RunRow) -> float | None:
    return run.losses[-1] if run.losses else None


def best_validation(run: RunRow) -> float | None:
    if run.best_validation is not None:
        return run.best_validation
    best = board.best_validation(run.validation)  # a live run: same rule as its row
    return best[0] if best else None


PLOT_PERIOD_S = 0.5  # curves redraw at most twice a second, whatever the update rate


def run_name(run_id: str) -> str:
    """One name per run, the one Gates shows in `lr_run [name]`; a retry adds `#attempt`."""
    try:
        base, attempt = split_run_id(run_id)
    except ValueError:
        return run_id
    return base if attempt == 1 else f"{base} #{attempt}"


def downsample(
    values: list[float], width: int, updates: list[int] | None = None
) -> tuple[list[float], list[float]]:
    """(x, y) with at most ~2 points per column: a 1500-update curve need not draw 1500 points.

    `updates` gives each value's update number (live points are throttled); else 1, 2, 3, …
    """
    n = len(values)
    x_all = (
        [float(u) for u in updates] if updates and len(updates) == n else [float(i) for i in range(1, n + 1)]
    )
    stride = max(1, math.ceil(n / max(2 * width, 2)))
    xs, ys = x_all[::stride], values[::stride]
    if n and (n - 1) % stride:  # always end on the last point
        xs.append(x_all[-1])
        ys.append(values[-1])
    return xs, ys


def integer_ticks(last: int, count: int = 6) -> list[int]:
    """Whole update numbers for the x axis (plotext would write 0.5, 1.5, …)."""
    step = max(1, math.ceil(last / max(count - 1, 1)))
    return list(range(0, last + step, step))


def run_cells(run: RunRow) -> tuple[Any, ...]:
    lr, seed = run.lr, run.seed
    if lr is None:  # a live run before its row: its name says its LR and seed
        with contextlib.suppress(ValueError):
            lr, seed = parse_run_name(split_run_id(run.id)[0])
    status = run.status
    stop = run.stop_cause
    if stop and run.stop_step is not None:
        stop = f"{stop} @{run.stop_step}"
    # Text, never str: a DataTable reads a str cell as markup, and a run id is record text.
    return (
        Text(run_name(run.id or "?")),
        Text(fmt_value(lr if lr is not None else "")),
        Text(str(seed if seed is not None else "")),
        Text(status, style=STATUS_STYLE.get(status, "red" if "fail" in status or "diverg" in status else "")),
        Text(stop),
        Text(fmt_value(last_loss(run)) if last_loss(run) is not None else "—"),
        Text(fmt_value(best_validation(run)) if best_validation(run) is not None else "—"),
    )


# (header, record keys tried in order) around the dimensions' columns; a column shows only
# when some variant has it.
LEADING_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (("variant", ("id",)),)
TRAILING_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("verdict", ("verdict",)),
    ("peak", PEAK_KEYS),
    ("peak ×", ("peak_reserved_ratio", "peak_rss_ratio", "peak_ratio")),
    ("step ×", ("step_time_ratio",)),
    ("question", ("changes_question",)),
)


def variant_columns(variants: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """The columns of the variants table: each configuration dimension with a header
    (core/dimensions.py) shows when the entries differ in it — what the variants vary."""
    dims = []
    for d in dimensions.with_column():
        values = {repr(v[d.params_key]) for v in variants if d.params_key in v}
        if len(values) > 1:
            dims.append((d.column, (d.params_key,)))
    columns = [*LEADING_COLUMNS, *dims, *TRAILING_COLUMNS]
    return [(h, keys) for h, keys in columns if any(k in v for v in variants for k in keys)]


def _dimension_cell(d: dimensions.Dimension, value: Any, v: dict[str, Any]) -> Text:
    if d.name == "microbatch":
        return Text(f"{value}×{v.get('accumulation', '?')}")
    if d.type is bool:
        return Text("on" if value else "off")
    return Text(fmt_value(value))


def _variant_cell(header: str, keys: tuple[str, ...], v: dict[str, Any]) -> Text:
    # A variant entry carries the same peak counters as a row: rows.Memory picks the figure.
    value = Memory.from_toml(v).peak() if header == "peak" else next((v[k] for k in keys if k in v), None)
    if value is None:
        return Text("—" if header != "variant" else "?", style="dim")
    dim = next((d for d in dimensions.with_column() if d.column == header), None)
    if dim is not None:
        return _dimension_cell(dim, value, v)
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
    columns = variant_columns(variants)
    for header, _ in columns:
        table.add_column(header, no_wrap=True)
    for v in variants:
        table.add_row(*(_variant_cell(h, keys, v) for h, keys in columns))
    return table


class LossPlot(PlotextPlot):
    """A plotext plot built once per data change and size, not at every render.

    Building a plot is pure Python and slow: a pane switch re-renders the newly shown widgets, and
    a build there made the Board answer a key in hundreds of ms while a run trained.
    """

    version = 0

    def on_resize(self) -> None:
        # The curves were downsampled to the old width (a scrollbar that came or went, the pane
        # first shown, a resized terminal): the Board builds them again from the same runs.
        if isinstance(self.parent, BoardPane):
            self.parent.plot_resized()

    def render(self) -> RenderResult:
        key = (self.version, self.size, self.app.theme)
        if getattr(self, "_built", None) is None or self._built[0] != key:
            self._built = (key, super().render())
        return self._built[1]


class BoardPane(RestyleSelfOnFocus, Vertical):
    """LR runs table, their loss curves (train solid, validation marked), and memory variants."""

    can_focus = True  # so the tab can hold focus before any run exists

    def compose(self) -> ComposeResult:
        yield Static("", id="board-decision")
        yield Static("No LR runs yet: they appear here when the lr_run steps run.", id="board-empty")
        yield DataTable(id="run-table", cursor_type="row", zebra_stripes=True)
        yield LossPlot(id="loss-plot")
        yield Static(id="variants")

    def on_mount(self) -> None:
        table = self.query_one("#run-table", DataTable)
        for name in RUN_COLUMNS:
            table.add_column(name, key=name)
        self._signature: tuple[Any, ...] = ()
        self._plotted_at = 0.0
        self._pending: list[RunRow] | None = None
        # What the curves were last built from, and at which plot width: curves built while the
        # pane was hidden (no width) are built again once it has one.
        self._plotted: tuple[list[RunRow], int] | None = None
        self._decision: Any = None
        self._variants: Any = None
        self._cells: dict[str, tuple[Any, ...]] = {}
        self.query_one("#board-decision").display = False
        plt = self.query_one(PlotextPlot).plt
        plt.title("loss per update")

    def show(
        self,
        runs: list[RunRow],
        variants: list[dict[str, Any]],
        board: dict[str, Any] | None = None,
    ) -> None:
        """Redraw from the merged runs (record rows + live points); curves at most twice a second."""
        table = self.query_one("#run-table", DataTable)
        decision = (board or {}).get("decision")
        if decision != self._decision:
            self._decision = decision
            widget = self.query_one("#board-decision", Static)
            widget.display = bool(decision)
            widget.update(Text(f"decision: {decision}", style="bold") if decision else "")
        self.query_one("#board-empty").display = not runs
        table.display = bool(runs)
        self.query_one(PlotextPlot).display = bool(runs)
        for run in runs:
            key = run.id
            cells = run_cells(run)
            shown = self._cells.get(key)
            if key not in table.rows:
                table.add_row(*cells, key=key)
            elif shown != cells:
                for column, value, old in zip(table.columns, cells, shown or cells, strict=True):
                    if value != old or shown is None:
                        # Widths follow the content (a first, empty live row must not fix them),
                        # but re-measuring relays out the screen: only when the cell is wider.
                        wider = cell_len(str(value)) > table.columns[column].content_width
                        table.update_cell(key, column, value, update_width=wider)
            self._cells[key] = cells
        signature = tuple((r.id, r.version, len(r.losses), len(r.validation)) for r in runs)
        if signature != self._signature:
            self._signature = signature
            self._plot_soon(runs)
        if variants != self._variants:
            self._variants = variants
            self.query_one("#variants", Static).update(variants_table(variants) if variants else "")

    def _plot_soon(self, runs: list[RunRow]) -> None:
        """Plot after the next frame (at most every PLOT_PERIOD_S), never inside the call that
        asked: a switch to this pane shows the curves last built at once, and the new ones a
        frame later, so the key's answer does not wait for plotext."""
        wait = max(0.0, self._plotted_at + PLOT_PERIOD_S - time.monotonic())
        if self._pending is None:
            if wait <= 0:
                self.call_after_refresh(self._plot_pending)
            else:
                self.set_timer(wait, self._plot_pending)
        self._pending = runs

    @property
    def plotted_width(self) -> int | None:
        """The width the curves shown were downsampled to (None before the first plot)."""
        return self._plotted[1] if self._plotted is not None else None

    def plot_resized(self) -> None:
        """Curves are downsampled to the plot's width: a new width builds them again."""
        if self._plotted is not None and self._plotted[1] != self._plot_width():
            self._plot_soon(self._plotted[0])

    def _plot_width(self) -> int:
        return max(self.query_one(PlotextPlot).size.width - 8, 10)

    @property
    def plot_pending(self) -> bool:
        """Curves asked for and not drawn yet (they come a frame after the table)."""
        return self._pending is not None

    def _plot_pending(self) -> None:
        runs, self._pending = self._pending, None
        if runs is not None:
            self._plot(runs)

    def _plot(self, runs: list[RunRow]) -> None:
        self._plotted_at = time.monotonic()
        widget = self.query_one(PlotextPlot)
        width = self._plot_width()
        self._plotted = (runs, width)
        plt = widget.plt
        plt.clear_data()
        last = 1
        for run in runs:
            losses = list(run.losses)
            if losses:
                xs, ys = downsample(losses, width, list(run.loss_updates or []) or None)
                keep = [(x, y) for x, y in zip(xs, ys, strict=True) if isinstance(y, int | float)]
                if keep:
                    plt.plot(
                        [x for x, _ in keep],
                        [y for _, y in keep],
                        label=run_name(run.id),
                        marker="braille",
                    )
                    last = max(last, int(xs[-1]))
            points = run.validation_points()
            if points:
                plt.scatter([u for u, _ in points], [loss for _, loss in points], marker="x")
        ticks = integer_ticks(last)
        plt.xticks(ticks, [str(t) for t in ticks])
        widget.version += 1
        widget.refresh()
