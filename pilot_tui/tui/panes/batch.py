"""Batch pane: the `inspect` phase's examples token by token, coloured by what the loss sees.

Colour tokens: supervised (counts in the loss), ignored (label = ignore index), padding, and cut
(dropped by truncation); a magenta bar marks a document boundary in a packed row (position_ids
restart). Then the per-example summary and the flags over the whole dataset.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...core.rows import PhaseRow
from ..focus import RestyleSelfOnFocus
from ..state import fmt_value

TOKEN_STYLES = {
    "supervised": "bold black on green",
    "ignored": "white on grey30",
    "padding": "grey50 on grey11",
    "cut": "strike red",
}
ALIASES = {"sup": "supervised", "loss": "supervised", "ign": "ignored", "pad": "padding", "prompt": "ignored"}
NO_INSPECT = (
    "No inspect row yet: the inspect phase has not run in this campaign (or it is skipped). "
    "Run it (n / a) to see the examples token by token as the model receives them."
)
# Keys of an example drawn as tokens (or skipped) rather than listed in its one-line summary.
TOKEN_KEYS = ("tokens", "text", "flags", "index", "id")
VERDICT_STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red"}
VERDICT_MARKS = {"pass": "✓", "warn": "!", "fail": "✗"}


# A document boundary in a packed or padding-free row (position_ids restart), drawn before the token.
BOUNDARY, BOUNDARY_STYLE = "│", "bold magenta"


def legend(boundaries: bool = False) -> Text:
    text = Text("legend: ")
    for kind, style in TOKEN_STYLES.items():
        text.append(f" {kind} ", style=style)
        text.append(" ")
    if boundaries:
        text.append(BOUNDARY, style=BOUNDARY_STYLE)
        text.append(" document boundary")
    return text


def _role(value: Any) -> str:
    role = str(value).lower()
    return ALIASES.get(role, role)


def token_text(tokens: list[Any]) -> Text:
    """Each token styled by its role in the loss (`role`: supervised / ignored / padding / cut)."""
    out = Text(overflow="fold")
    for tok in tokens:
        if isinstance(tok, dict):
            piece = str(tok.get("piece", tok.get("text", "?")))
            role = _role(tok.get("role", tok.get("kind", "")))
        else:
            piece, role = str(tok), ""
        piece = piece.replace("\n", "⏎").replace(" ", "␣") or "∅"
        if isinstance(tok, dict) and tok.get("boundary"):
            out.append(BOUNDARY, style=BOUNDARY_STYLE)
        out.append(piece, style=TOKEN_STYLES.get(role, ""))
    return out


def example_summary(example: dict[str, Any]) -> Text:
    """One line: split, lengths (raw, truncated, padded), supervised tokens, response cut…"""
    parts = [f"{k.replace('_', ' ')} {fmt_value(v)}" for k, v in example.items() if k not in TOKEN_KEYS]
    return Text(" · ".join(parts), style="dim")


def checks_table(checks: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, style="bold")
    table.add_column()
    for c in checks:
        verdict = str(c.get("verdict", "?"))
        style = VERDICT_STYLES.get(verdict, "")
        table.add_row(
            Text(VERDICT_MARKS.get(verdict, "?"), style=style),
            Text(str(c.get("name", ""))),
            Text(str(c.get("message", "")), style=style if verdict != "pass" else ""),
        )
    return table


def render_inspect(row: PhaseRow | None) -> RenderableType:
    """The inspect row: tokens coloured by role, each example's summary and flags, the checks."""
    if row is None:
        return Text(NO_INSPECT, style="dim")
    details = dict(row.details)
    parts: list[RenderableType] = [
        Text(f"inspect: {row.verdict} — {row.reason}", style=VERDICT_STYLES.get(row.verdict, "bold")),
    ]
    checks = details.pop("checks", None) or []
    if checks:
        parts.append(checks_table(checks))
    examples = details.pop("examples", None) or []
    details.pop("legend", None)
    if any(isinstance(e, dict) and e.get("tokens") for e in examples):
        boundaries = any(
            isinstance(t, dict) and t.get("boundary")
            for e in examples
            if isinstance(e, dict) and isinstance(e.get("tokens"), list)
            for t in e["tokens"]
        )
        parts.append(legend(boundaries))
    parts.append(Text(""))
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            parts.append(Text(fmt_value(example)))
            continue
        title = Text(f"example {example.get('index', i)}", style="bold underline")
        if example.get("id") is not None:
            title.append(f"  {example['id']}", style="dim")
        parts.append(title)
        if example.get("tokens"):
            parts.append(token_text(example["tokens"]))
        elif example.get("text"):
            parts.append(Text(str(example["text"])))
        flags = example.get("flags") or []
        if flags:
            parts.append(Text("flags: " + ", ".join(map(str, flags)), style="bold yellow"))
        parts.append(example_summary(example))
        parts.append(Text(""))
    tables = {
        k: details.pop(k)
        for k in list(details)
        if isinstance(details[k], list) and details[k] and isinstance(details[k][0], dict)
    }
    if details:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for key, value in details.items():
            grid.add_row(Text(str(key)), Text(fmt_value(value)))
        parts += [Text("whole dataset", style="bold underline"), grid]
    for key, rows in tables.items():
        table = Table(title=key.replace("_", " "), title_justify="left", box=None, padding=(0, 1))
        keys = list(dict.fromkeys(k for r in rows for k in r))
        for k in keys:
            table.add_column(k)
        for r in rows:
            table.add_row(*(Text(fmt_value(r.get(k, ""))) for k in keys))
        parts.append(table)
    return Group(*parts)


class BatchPane(RestyleSelfOnFocus, VerticalScroll):
    """The inspected batch: tokens coloured by their role in the loss, summary, flags."""

    def compose(self) -> ComposeResult:
        yield Static(Text(NO_INSPECT, style="dim"), id="batch-body")

    _row: PhaseRow | None = None
    _drawn = False

    def show(self, row: PhaseRow | None) -> None:
        """Draw the inspected batch once per row: a visit to the pane re-renders nothing (rows are
        replaced when a step re-runs, never mutated, so identity says whether it changed)."""
        if self._drawn and row is self._row:
            return
        self._row, self._drawn = row, True
        self.query_one("#batch-body", Static).update(render_inspect(row))
