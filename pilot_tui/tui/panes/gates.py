"""Gates pane: one row per step — status, progress, duration, peak memory, reason — and details."""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

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

STYLES = {PASS: "green", WARN: "yellow", FAIL: "bold red", RUNNING: "bold cyan", QUEUED: "cyan"}
# (title, width); the reason takes what is left and the details box shows it whole. Fixed widths
# keep the columns still while cells change, and fit 80 columns up to the reason.
COLUMNS = (
    ("", 1),
    ("step", 18),
    ("status", 13),
    ("time", 8),
    ("peak alloc", 11),
    ("peak reserved", 11),
    ("reason", None),
)


def status_cell(gate: GateState) -> Text:
    style = STYLES.get(gate.status, "dim")
    if gate.status == RUNNING and gate.total:
        return Text(f"{bar(gate.done, gate.total, 8)} {gate.done}/{gate.total}", style=style)
    return Text(gate.status, style=style)


def row_cells(gate: GateState, started: float | None, now: float) -> tuple[Text, ...]:
    memory = gate.row.get("memory", {}) if gate.row else {}
    alloc, reserved = memory_columns(memory) if gate.row else ("", "")
    if gate.row:
        duration = fmt_duration(gate.row.get("duration_s"))
    elif gate.status == RUNNING and started is not None:
        duration = f"{int(now - started)} s"  # whole seconds: the cell changes once a second
    else:
        duration = ""
    reason = gate.row.get("reason", "") if gate.row else gate.message
    # Text, not str: a DataTable reads str cells as markup, and `phase [variant]` is not markup.
    return (
        Text(MARKS.get(gate.status, "?"), style=STYLES.get(gate.status, "dim")),
        Text(gate.label),
        status_cell(gate),
        Text(duration),
        Text(alloc),
        Text(reserved),
        Text(str(reason), no_wrap=True),
    )


def detail(gate: GateState) -> Table:
    """Params, memory counters and details of one step, as the record holds them."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    row = gate.row
    grid.add_row("step", Text(f"{gate.key}  ({gate.status})"))
    if row.get("reason"):
        grid.add_row("reason", Text(str(row["reason"]), style=STYLES.get(gate.status, "")))
    if row.get("started"):
        grid.add_row("started", Text(str(row["started"])))
    if gate.status == RUNNING and gate.total:
        loss = f", loss {gate.loss:.4f}" if gate.loss is not None else ""
        grid.add_row("progress", Text(f"{gate.done}/{gate.total}{loss} {gate.message}"))
    params = row.get("params") or gate.params
    for title, section in (
        ("params", params),
        ("memory", row.get("memory")),
        ("details", row.get("details")),
    ):
        if not section:
            continue
        grid.add_row("", "")
        grid.add_row(Text(title, style="bold underline"), "")
        for key, value in section.items():
            grid.add_row(Text(f"  {key}"), Text(fmt_value(value)))
    if not row and not params:
        grid.add_row("", Text("not run yet", style="dim"))
    return grid


class GatesPane(Vertical):
    """The table of gates plus the selected row's details."""

    def compose(self) -> ComposeResult:
        table: DataTable = DataTable(id="gate-table", cursor_type="row", zebra_stripes=True)
        yield table
        with VerticalScroll(id="gate-detail-box"):
            yield Static(id="gate-detail")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name, width in COLUMNS:
            table.add_column(name, key=name or "mark", width=width)
        self._gates: dict[str, GateState] = {}
        self._shown: GateState | None = None
        self._cells: dict[str, dict[str, Text]] = {}
        self._cpu = False

    def set_cpu(self) -> None:
        """On CPU there is no reserved counter: one "peak RSS" column, more room for the reason."""
        if self._cpu:
            return
        self._cpu = True
        table = self.query_one(DataTable)
        table.remove_column("peak reserved")
        table.columns["peak alloc"].label = Text("peak RSS")
        table.refresh()

    @property
    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key((table.cursor_row, 0))
        return str(row_key.value)

    def show(self, gates: list[GateState], started: dict[str, float]) -> None:
        """Redraw from the app's gate states (called at most ~10×/s by the app's throttle)."""
        table = self.query_one(DataTable)
        now = time.monotonic()
        names = [name or "mark" for name, _ in COLUMNS]
        for gate in gates:
            cells = dict(zip(names, row_cells(gate, started.get(gate.key), now), strict=True))
            if self._cpu:
                cells["peak alloc"] = Text(cells["peak alloc"].plain.removesuffix(" RSS"))
                del cells["peak reserved"]
            if gate.key not in table.rows:
                table.add_row(*cells.values(), key=gate.key)
                self._cells[gate.key] = cells
                continue
            previous = self._gates.get(gate.key)
            if previous == gate and gate.status != RUNNING:
                continue
            # Only cells whose text changed: each update invalidates the table's render cache,
            # and a running row's elapsed time moves once a second, not at every redraw.
            shown = self._cells[gate.key]
            widen = previous is None or previous.status != gate.status
            for column, value in cells.items():
                if shown.get(column) != value:
                    # Only a finished row widens the reason column: re-measuring relays out.
                    table.update_cell(gate.key, column, value, update_width=widen and column == "reason")
                    shown[column] = value
        self._gates = {g.key: g for g in gates}
        self._show_detail()

    def _show_detail(self) -> None:
        key = self.selected_key
        gate = self._gates.get(key) if key else None
        if gate is self._shown and gate is not None:
            return  # unchanged: rebuilding the details would relayout the whole screen
        self._shown = gate
        self.query_one("#gate-detail", Static).update(detail(gate) if gate else "")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()
