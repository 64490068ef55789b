"""Modal screens: quit confirmation, the variant form, free-text prompts (notes) and help."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from ..core import dimensions


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; `y` / enter says yes, `n` / escape says no."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            yield Label("[b]y[/b] yes   [b]n[/b] no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class VariantForm(ModalScreen[dict[str, Any] | None]):
    """Overrides for re-running a phase as a new variant; empty fields keep the control's value."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "cancel"),
        Binding("ctrl+s", "submit", "run"),
    ]

    def __init__(self, phase: str, variant_id: str, current: dict[str, Any]) -> None:
        super().__init__()
        self.phase = phase
        self.variant_id = variant_id
        self.current = current

    def compose(self) -> ComposeResult:
        # One field per configuration dimension the table puts in the form (core/dimensions.py),
        # a row per kind of widget: numbers, choices, switches.
        with Vertical(classes="dialog", id="variant-form"):
            yield Label(f"Re-run [b]{self.phase}[/b] as variant [b]{self.variant_id}[/b]")
            for kind in ("integer", "select"):
                with Horizontal(classes="row"):
                    for d in dimensions.in_form():
                        if d.form == kind:
                            with Vertical(classes="cell"):
                                yield Label(d.title, classes="field")
                                yield self._field(d)
            for d in dimensions.in_form():
                if d.form == "checkbox":
                    yield self._field(d)
            with Horizontal(classes="buttons"):
                yield Button("Run", variant="primary", id="run")
                yield Button("Cancel", id="cancel")
            yield Label("tab: next field · enter: run · esc: cancel", classes="hint")

    def _field(self, d: dimensions.Dimension) -> Input | Select[str] | Checkbox:
        current = self.current.get(d.params_key)
        if d.form == "integer":
            return Input(placeholder=str(current if current is not None else ""), type="integer", id=d.name)
        if d.form == "select":
            return Select(
                [(str(c), c) for c in d.choices],
                value=current if current in d.choices else Select.BLANK,
                allow_blank=True,
                id=d.name,
            )
        return Checkbox(d.title, value=bool(current), id=d.name)

    def overrides(self) -> dict[str, Any]:
        """Only what the user changed: an empty field keeps the control's value."""
        out: dict[str, Any] = {}
        for d in dimensions.in_form():
            current = self.current.get(d.params_key)
            if d.form == "integer":
                text = self.query_one(f"#{d.name}", Input).value.strip()
                if text:
                    out[d.name] = int(text)
            elif d.form == "select":
                value = self.query_one(f"#{d.name}", Select).value
                if value in d.choices and value != current:
                    out[d.name] = value
            elif d.form == "checkbox":
                checked = self.query_one(f"#{d.name}", Checkbox).value
                if checked != bool(current):
                    out[d.name] = checked
        return out

    def on_input_submitted(self) -> None:
        self.action_submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.action_submit()
        else:
            self.action_cancel()

    def action_submit(self) -> None:
        for d in dimensions.in_form():
            if d.form != "integer":
                continue
            text = self.query_one(f"#{d.name}", Input).value.strip()
            if text and (not text.isdigit() or dimensions.problem(d, int(text)) is not None):
                self.notify(f"{d.title} must be a positive integer", severity="error")
                return
        self.dismiss(self.overrides())

    def action_cancel(self) -> None:
        self.dismiss(None)


class TextPrompt(ModalScreen[dict[str, str] | None]):
    """One or two lines of free text (a note, a conclusion and its decision)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, second: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.second = second

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text)
            yield Input(id="text")
            if self.second:
                yield Label(self.second, classes="field")
                yield Input(id="second")
            yield Label("enter: save · esc: cancel", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.second and event.input.id == "text":
            self.query_one("#second", Input).focus()
            return
        text = self.query_one("#text", Input).value.strip()
        if not text:
            self.notify("nothing written: the text is empty", severity="warning")
            return
        second = self.query_one("#second", Input).value.strip() if self.second else ""
        self.dismiss({"text": text, "second": second})

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, from the app's own bindings."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(box=None, padding=(0, 2), show_header=False)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, text in self.keys:
            table.add_row(Text(key), Text(text))
        with Vertical(classes="dialog", id="help"):
            yield Label("[b]pilot-tui keys[/b]")
            yield Static(table)
            yield Label("ctrl+p: command palette · esc: close", classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)
