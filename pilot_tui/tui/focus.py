"""Focus changes that cost what they change: a pane switch moves focus into the new pane, and
Textual's defaults made that the dearest part of the switch.

- `Screen.focused` is a repainting reactive: every focus change re-rendered and re-sent the whole
  screen (a full frame, about 5 KB to the terminal). The widgets that gain and lose focus refresh
  themselves already (`Widget._on_focus` / `_on_blur`), so the screen's own repaint adds nothing.
- A widget gaining or losing focus restyles its whole subtree (`:focus` rules may style
  descendants). No rule of this app styles a pane's children by the pane's focus, so a pane
  restyles itself alone: the Counters pane had ten nodes restyled twice per visit.
"""

from __future__ import annotations

from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget


class QuietFocusScreen(Screen[None]):
    """The dashboard's default screen: a focus change repaints only the widgets it restyles."""

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)


class RestyleSelfOnFocus:
    """Mixin (before the widget class) for a pane whose focus changes restyle the pane, not every
    widget inside it. Not a Widget itself: Textual would fix its `can_focus` to False.

    Keep it so: a stylesheet rule such as `BatchPane:focus Static` would need the subtree again.
    """

    def watch_has_focus(self, _has_focus: bool) -> None:
        assert isinstance(self, Widget)
        self.app.stylesheet.update_nodes([self], animate=True)
