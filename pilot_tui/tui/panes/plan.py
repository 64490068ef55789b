"""Plan pane: the record's `[plan]` as `pilot-tui plan` prints it — its decision first, then the
caveats and the details — then notes.

The per-configuration lines come on demand (`d`). A `[plan]` that the text view cannot read (an
older record) is rendered generically as a nested dict, so nothing is lost.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...analysis.plan import Plan, PlanFormatError, decide, text_lines
from ..focus import RestyleSelfOnFocus
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


KEY_WIDTH = 22  # `plan_lines` writes "  key" padded to this, then the value


def _split(line: str) -> tuple[str, str] | None:
    """("key", "value") of a "  key   value" line, or ("!", text) of a caveat; None otherwise."""
    if line.startswith("! "):
        return "!", line[2:]
    if (
        len(line) > KEY_WIDTH
        and line[:2] == "  "
        and line[2] != " "
        and line[KEY_WIDTH - 1] == " "
        and line[KEY_WIDTH] != " "
    ):
        return line[:KEY_WIDTH].strip(), line[KEY_WIDTH:]
    return None


def plan_text(plan: dict[str, Any] | None, detailed: bool) -> RenderableType:
    """What `pilot-tui plan` prints, caveats first; the per-configuration lines only on demand.

    "key  value" lines become a two-column grid, so a long value wraps under itself, not under
    the key (readable at 80 columns).
    """
    if not plan:
        return Text(NO_PLAN, style="dim")
    if "error" in plan:
        return Text(f"plan: could not be computed: {plan['error']}", style="bold red")
    try:
        parsed = Plan.from_toml(plan)
        lines = text_lines(parsed)
        decision = decide(parsed).lines
    except PlanFormatError:
        return render_plan(plan)  # an older or partial [plan]: show what it holds
    # The decision first, in at most six lines (visible at 80×24 without scrolling); the details follow.
    head = Table.grid(padding=(0, 1))
    head.add_column(no_wrap=True, style="bold")
    head.add_column()
    for line in decision:
        head.add_row(Text(f"{line.label}:", style="bold"), Text(line.text))
    parts: list[RenderableType] = [head, Text("")]
    grid: Table | None = None
    skipping, hidden = False, 0
    for line in lines:
        if not detailed:
            if line == "  configurations":
                skipping = True
            elif skipping and not line.startswith("    "):
                skipping = False
            if skipping:
                hidden += 1
                continue
        pair = _split(line)
        if pair is None:
            grid = None
            style = "bold underline" if line and line[0] != " " else ""
            parts.append(Text(line, style=style))
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 1))
            grid.add_column(no_wrap=True, style="bold")
            grid.add_column()
            parts.append(grid)
        key, value = pair
        caveat = key == "!"
        grid.add_row(
            Text(key, style="bold yellow" if caveat else "bold"),
            Text(value, style="yellow" if caveat else ""),
        )
    if hidden:
        parts.append(Text(f"  ({hidden - 1} configuration lines: d shows them)", style="dim"))
    return Group(*parts)


def notes_list(notes: list[dict[str, Any]]) -> RenderableType:
    """Every `[[notes]]` entry: its target, then its text."""
    table = Table(title="Notes", title_justify="left", title_style="bold underline", box=None, padding=(0, 1))
    table.add_column("on", no_wrap=True, style="bold")
    table.add_column("note")
    for note in notes:
        if isinstance(note, dict):
            table.add_row(Text(str(note.get("target", ""))), Text(str(note.get("text", ""))))
    return table


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


class PlanPane(RestyleSelfOnFocus, VerticalScroll):
    """The plan as `pilot-tui plan` prints it (caveats first), the conclusion and the notes."""

    def compose(self) -> ComposeResult:
        yield Static(Text(NO_PLAN, style="dim"), id="plan-body")

    def on_mount(self) -> None:
        self.detailed = False
        self._shown: tuple[Any, ...] = ()

    def toggle_detail(self) -> None:
        self.detailed = not self.detailed
        self._draw(*self._shown[:3])

    def show(
        self,
        plan: dict[str, Any] | None,
        conclusion: dict[str, Any] | None = None,
        notes: list[dict[str, Any]] | None = None,
    ) -> None:
        """Draw only when the plan, conclusion or notes changed (never recomputed per visit)."""
        state = (plan, conclusion, list(notes or []), self.detailed)
        if state == self._shown:
            return
        self._draw(plan, conclusion, notes)

    def _draw(
        self,
        plan: dict[str, Any] | None,
        conclusion: dict[str, Any] | None,
        notes: list[dict[str, Any]] | None,
    ) -> None:
        self._shown = (plan, conclusion, list(notes or []), self.detailed)
        parts: list[RenderableType] = [plan_text(plan, self.detailed)]
        if conclusion:
            parts.append(render(conclusion, "Conclusion"))
        if notes:
            parts.append(notes_list(notes))
        self.query_one("#plan-body", Static).update(Group(*parts))
