"""A Footer that recomposes only when the keys it shows change.

Textual's Footer rebuilds all its key widgets on every focus change (a pane switch moves focus two
or three times), and each rebuild restyles ~100 nodes: measured, that was most of the dashboard's
own cost of a pane switch while a run trained. The dashboard's shown keys hardly ever
change, so the rebuild is skipped when they are the same.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class QuietFooter(Footer):
    """Footer whose rebuild waits for a change in (key, description, enabled) of the shown keys."""

    _shown: tuple[Any, ...] | None = None
    _pending = False

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        shown = tuple(
            (binding.key, binding.description, enabled)
            for (_, binding, enabled, _) in screen.active_bindings.values()
            if binding.show
        )
        if shown == self._shown:
            return
        self._shown = shown
        if not self._pending:
            self._pending = True
            self.call_after_refresh(self._rebuild)

    async def _rebuild(self) -> None:
        self._pending = False
        await self.recompose()
