"""Command palette provider: the same actions as the keys, found by name (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (title, action name, help); the app runs `action_<name>`, exactly what the key does.
ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("Next step", "next_step", "run the next waiting step (n / space)"),
    ("Run all remaining", "run_all", "queue every waiting step (a)"),
    ("Re-run as variant", "variant", "re-run the selected phase with overrides (v)"),
    ("Cancel running phase", "cancel_phase", "stop the running phase (c)"),
    ("Re-run step", "rerun", "run the selected step again under its own key (r)"),
    ("Toggle details", "toggle_detail", "the selected step's details; the plan's configurations (d)"),
    ("Save record", "save_record", "write the record and show its path (e)"),
    ("Add note", "note", "an observation on the selected row (o)"),
    ("Conclude campaign", "conclude", "the campaign's conclusion and decision (C)"),
    ("Show Gates", "show_pane('gates')", "pane 1"),
    ("Show Batch", "show_pane('batch')", "pane 2"),
    ("Show Counters", "show_pane('counters')", "pane 3"),
    ("Show Board", "show_pane('board')", "pane 4"),
    ("Show Plan", "show_pane('plan')", "pane 5"),
    ("Help", "help", "every key (?)"),
    ("Quit", "request_quit", "asks first while a phase runs (q)"),
)


class PilotCommands(Provider):
    """Lists the dashboard's actions; hides the ones a read-only record cannot do."""

    def _actions(self) -> list[tuple[str, str, str]]:
        app = self.app
        allowed = getattr(app, "palette_allows", lambda name: True)
        return [a for a in ACTIONS if allowed(a[1])]

    async def discover(self) -> Hits:
        for title, action, text in self._actions():
            yield DiscoveryHit(title, partial(self.app.run_action, action), help=text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, text in self._actions():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self.app.run_action, action), help=text)
