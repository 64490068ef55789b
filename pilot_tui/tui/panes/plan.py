"""Plan pane: the record's `[plan]` — choice sheet and rental package — rendered generically.

The plan is built elsewhere and only grows, so this pane reads it as a nested dict: scalars as
key/value lines, lists of tables as tables, nested tables as sub-sections.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..state import fmt_value

NO_PLAN = (
    "No plan yet. The choice sheet and the 3/7/30-day package are built from the measured "
    "phases once the campaign has run (record section [plan])."
)


def _table_of_rows(rows: list[dict[str, Any]]) -> RenderableType:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    if len(keys) > 6:
        # Too wide for a terminal: one key/value block per row instead of squeezed columns.
        blocks: list[RenderableType] = []
        for row in rows:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold", no_wrap=True)
            grid.add_column()
            for k in keys:
                if k in row:
                    grid.add_row(Text(f"  {k}"), Text(fmt_value(row[k])))
            blocks += [grid, Text("")]
        return Group(*blocks)
    table = Table(box=None, padding=(0, 1), show_edge=False)
    for key in keys:
        table.add_column(key.replace("_", " "))
    for row in rows:
        table.add_row(*(Text(fmt_value(row.get(k, ""))) for k in keys))
    return table


def render(value: Any, title: str = "", depth: int = 0) -> RenderableType:
    """A nested dict / list of dicts as readable sections; nothing is dropped."""
    parts: list[RenderableType] = []
    if title:
        parts.append(Text(title, style="bold underline" if depth == 0 else "bold"))
    if isinstance(value, dict):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        nested = []
        for key, item in value.items():
            if isinstance(item, dict) or (isinstance(item, list) and item and isinstance(item[0], dict)):
                nested.append((key, item))
            else:
                grid.add_row(Text(f"  {key}" if depth else str(key)), Text(fmt_value(item)))
        if grid.row_count:
            parts.append(grid)
        for key, item in nested:
            parts.append(render(item, key, depth + 1))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        parts.append(_table_of_rows(value))
    else:
        parts.append(Text(fmt_value(value)))
    parts.append(Text(""))
    return Group(*parts)


def render_plan(plan: dict[str, Any] | None) -> RenderableType:
    """`sheet` first, then `package`, then anything else the plan holds."""
    if not plan:
        return Text(NO_PLAN, style="dim")
    ordered = [k for k in ("sheet", "package") if k in plan] + [
        k for k in plan if k not in ("sheet", "package")
    ]
    scalars = {k: plan[k] for k in ordered if not isinstance(plan[k], dict | list)}
    parts: list[RenderableType] = []
    if scalars:
        parts.append(render(scalars))
    titles = {"sheet": "Choice sheet", "package": "Rental package"}
    for key in ordered:
        if key not in scalars:
            parts.append(render(plan[key], titles.get(key, key)))
    return Group(*parts)


class PlanPane(VerticalScroll):
    """The choice sheet and package plan, or a clear "no plan yet"."""

    def compose(self) -> ComposeResult:
        yield Static(Text(NO_PLAN, style="dim"), id="plan-body")

    def show(self, plan: dict[str, Any] | None, conclusion: dict[str, Any] | None = None) -> None:
        body = render_plan(plan)
        if conclusion:
            body = Group(body, render(conclusion, "Conclusion"))
        self.query_one("#plan-body", Static).update(body)
