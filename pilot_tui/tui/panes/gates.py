"""Gates pane: one row per step — status, progress, duration, peak memory, reason — and details."""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from ...core.rows import PhaseRow
from ..ranks import rank_table
from ..state import (
    FAIL,
    MARKS,
    PASS,
    QUEUED,
    RUNNING,
    WARN,
    GateState,
    bar,
    fmt_duration,
    fmt_value,
    memory_columns,
)

LABEL_WIDTH = 20
STATUS_WIDTH = 11
STYLES = {PASS: "green", WARN: "yellow", FAIL: "bold red", RUNNING: "bold cyan", QUEUED: "cyan"}
# (title, width); the reason takes what is left and the details box shows it whole. Fixed widths
# keep the columns still while cells change, and fit 80 columns up to the reason.
COLUMNS = (
    ("", 1),
    ("step", LABEL_WIDTH),
    ("status", STATUS_WIDTH),
    ("time", 7),
    ("peak alloc", 9),
    ("peak reserved", 9),
    ("reason", None),
)


def status_cell(gate: GateState) -> Text:
    """`waiting`, or a bar with done/total that always keeps the whole counter (the bar shrinks)."""
    style = STYLES.get(gate.status, "dim")
    if gate.status == RUNNING and gate.total:
        count = f"{gate.done}/{gate.total}"
        width = STATUS_WIDTH - len(count) - 1
        return Text(f"{bar(gate.done, gate.total, width)} {count}" if width >= 2 else count, style=style)
    return Text(gate.status, style=style)


def fit(text: str, width: int) -> str:
    """`text` cut to `width` cells, ending in "…" when cut (a cut figure never looks whole)."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def row_cells(
    gate: GateState, started: float | None, now: float, reason_width: int = 200, noted: bool = False
) -> tuple[Text, ...]:
    row = gate.row
    alloc, reserved = memory_columns(row.memory) if row is not None else ("", "")
    if row is not None:
        duration = fmt_duration(row.duration_s)
    elif gate.status == RUNNING and started is not None:
        duration = f"{int(now - started)} s"  # whole seconds: the cell changes once a second
    else:
        duration = ""
    reason = _reason(gate)
    # Text, not str: a DataTable reads str cells as markup, and `phase [variant]` is not markup.
    return (
        Text(MARKS.get(gate.status, "?"), style=STYLES.get(gate.status, "dim")),
        # The mark is kept whole: a long label is cut first (`serving_check [control]` is 23).
        Text(fit(gate.label, LABEL_WIDTH - 2) + " ✎" if noted else fit(gate.label, LABEL_WIDTH)),
        status_cell(gate),
        Text(duration),
        Text(alloc),
        Text(reserved),
        Text(fit(reason, reason_width), no_wrap=True),
    )


def detail(gate: GateState, notes: list[str] | None = None) -> Table:
    """Params, memory counters and details of one step, as the record holds them; its notes."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    row = gate.row
    grid.add_row("step", Text(f"{gate.key}  ({gate.status})"))
    for text in notes or []:
        grid.add_row("note", Text(text, style="italic"))
    if row is not None and row.reason:
        grid.add_row("reason", Text(row.reason, style=STYLES.get(gate.status, "")))
    if row is not None and row.started:
        grid.add_row("started", Text(row.started))
    if gate.status == RUNNING and gate.total:
        loss = f", loss {gate.loss:.4f}" if gate.loss is not None else ""
        grid.add_row("progress", Text(f"{gate.done}/{gate.total}{loss} {gate.message}"))
    params = (row.params if row is not None else None) or gate.params
    for title, section in (
        ("params", params),
        ("memory", row.memory.values if row is not None else None),
        ("details", row.details if row is not None else None),
    ):
        if not section:
            continue
        grid.add_row("", "")
        grid.add_row(Text(title, style="bold underline"), "")
        for key, value in section.items():
            grid.add_row(Text(f"  {key}"), Text(fmt_value(value)))
        if title == "memory" and row is not None:
            add_ranks(grid, row)
    if row is None and not params:
        grid.add_row("", Text("not run yet", style="dim"))
    return grid


def summary(gate: GateState, notes: list[str] | None = None, width: int = 0) -> Text:
    """The one-line detail of a collapsed box: step, status, reason (d shows the rest)."""
    if gate.row is not None:
        reason = gate.row.reason
    elif gate.status == RUNNING:
        loss = f", loss {gate.loss:.4f}" if gate.loss is not None else ""
        reason = f"{gate.done}/{gate.total}{loss} {gate.message}" if gate.total else "started"
    else:
        reason = gate.message or "not run yet"
    text = Text("d▸ ", style="dim")
    text.append(f"{gate.key} · {gate.status} · ", style="bold")
    text.append(" ".join(str(reason).split()), style=STYLES.get(gate.status, "dim"))
    if notes:
        text.append(f" · {len(notes)} note(s)", style="italic")
    text.no_wrap, text.overflow = True, "ellipsis"
    if width > 0:
        text.truncate(width, overflow="ellipsis")  # cut with "…", never silently
    return text


def add_ranks(grid: Table, row: PhaseRow) -> None:
    """A phase run on several ranks: one line per rank under the worst rank's memory (R22)."""
    ranks = row.ranks
    if ranks:
        grid.add_row("", "")
        grid.add_row(Text(f"ranks ({len(ranks)})", style="bold underline"), "")
        grid.add_row("", rank_table(ranks))


class GatesPane(Vertical):
    """The table of gates plus the selected row's details (one line when collapsed, `d`)."""

    # The clock of the running row's elapsed time (a snapshot test fixes it).
    clock = staticmethod(time.monotonic)

    def compose(self) -> ComposeResult:
        table: DataTable = DataTable(id="gate-table", cursor_type="row", zebra_stripes=True)
        yield table
        with VerticalScroll(id="gate-detail-box"):
            yield Static(id="gate-detail")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name, width in COLUMNS:
            table.add_column(name, key=name or "mark", width=width or 20)
        self._gates: dict[str, GateState] = {}
        self._shown: tuple[GateState | None, bool, int] | None = None
        self._cells: dict[str, dict[str, Text]] = {}
        self._cpu = False
        self._reason_width = 20
        self._notes: dict[str, list[str]] = {}
        # The row the cursor was last moved to for the running step: while the cursor is still
        # there, it follows the next running step (a person who moved it keeps their row).
        self._followed: int | None = 0
        self.collapsed = self.app.size.height < 30

    def set_cpu(self) -> None:
        """On CPU there is no reserved counter: one "peak RSS" column, more room for the reason."""
        if self._cpu:
            return
        self._cpu = True
        table = self.query_one(DataTable)
        table.remove_column("peak reserved")
        table.columns[ColumnKey("peak alloc")].label = Text("peak RSS")
        self._fit_reason(force=True)

    def toggle_detail(self) -> None:
        self.collapsed = not self.collapsed
        self._show_detail()

    def on_resize(self) -> None:
        self._fit_reason()

    def _fit_reason(self, force: bool = False) -> None:
        """Give the reason column exactly the width left, and cut reasons to it with "…"."""
        table = self.query_one(DataTable)
        others = sum(c.get_render_width(table) for k, c in table.columns.items() if k.value != "reason")
        width = max(8, (table.size.width or self.app.size.width) - others - 2 * table.cell_padding - 1)
        if width == self._reason_width and not force:
            return
        self._reason_width = width
        column = table.columns[ColumnKey("reason")]
        column.width, column.auto_width = width, False
        for key, gate in self._gates.items():
            cell = Text(fit(_reason(gate), width), no_wrap=True)
            table.update_cell(key, "reason", cell)
            self._cells[key]["reason"] = cell
        table.refresh(layout=True)

    @property
    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key((table.cursor_row, 0))
        return str(row_key.value)

    def show(
        self, gates: list[GateState], started: dict[str, float], notes: dict[str, list[str]] | None = None
    ) -> None:
        """Redraw from the app's gate states (called at most ~10×/s by the app's throttle)."""
        table = self.query_one(DataTable)
        now = self.clock()
        names = [name or "mark" for name, _ in COLUMNS]
        notes = notes or {}
        renoted = notes != self._notes
        self._notes = notes
        newly_running = None
        for gate in gates:
            previous = self._gates.get(gate.key)
            if previous is gate and gate.status != RUNNING and not renoted:
                continue  # unchanged (states are replaced, never mutated): nothing to build
            cells = dict(
                zip(
                    names,
                    row_cells(gate, started.get(gate.key), now, self._reason_width, gate.key in notes),
                    strict=True,
                )
            )
            if self._cpu:
                cells["peak alloc"] = Text(cells["peak alloc"].plain.removesuffix(" RSS"))
                del cells["peak reserved"]
            if gate.status == RUNNING and (previous is None or previous.status != RUNNING):
                newly_running = gate.key
            if gate.key not in table.rows:
                table.add_row(*cells.values(), key=gate.key)
                self._cells[gate.key] = cells
                continue
            if previous == gate and gate.status != RUNNING and not renoted:
                continue
            # Only cells whose text changed: each update invalidates the table's render cache,
            # and a running row's elapsed time moves once a second, not at every redraw.
            shown = self._cells[gate.key]
            for column, value in cells.items():
                if shown.get(column) != value:
                    table.update_cell(gate.key, column, value)
                    shown[column] = value
        self._gates = {g.key: g for g in gates}
        if newly_running is not None:
            self._follow(newly_running)
        self._show_detail()

    def _follow(self, key: str) -> None:
        """Keep the running row in view: move the cursor to it unless the user moved it away."""
        table = self.query_one(DataTable)
        if self._followed is not None and table.cursor_row != self._followed:
            self._followed = None  # the user chose a row: leave it
            return
        index = table.get_row_index(key)
        table.move_cursor(row=index, animate=False)
        self._followed = index

    def _show_detail(self) -> None:
        key = self.selected_key
        gate = self._gates.get(key) if key else None
        box = self.query_one("#gate-detail-box")
        state = (gate, self.collapsed, len(self._notes.get(key or "", [])))
        if state == self._shown and gate is not None:
            return  # unchanged: rebuilding the details would relayout the whole screen
        # The box's height changes only with another step, a status or the collapse: only then
        # relayout (a running step's progress redraws its one line in place).
        previous = self._shown
        relayout = previous is None or previous[1:] != state[1:] or not previous[0] or not gate
        relayout = relayout or (previous[0].key, previous[0].status) != (gate.key, gate.status)
        self._shown = state
        box.set_class(self.collapsed, "collapsed")
        notes = self._notes.get(key or "", [])
        body = (
            ""
            if gate is None
            else (summary(gate, notes, self.size.width - 2) if self.collapsed else detail(gate, notes))
        )
        self.query_one("#gate-detail", Static).update(body, layout=relayout or not self.collapsed)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()


def _reason(gate: GateState) -> str:
    """The reason on one line: the row's once it has one, else what the step is doing."""
    return " ".join((gate.row.reason if gate.row is not None else gate.message).split())
