"""The Counters pane shows the machine check's figures beside the live counters, once it ran."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label, Static

from pilot_tui.core.rows import PhaseRow
from pilot_tui.tui.panes.counters import CountersPane

ROW = {
    "name": "machine",
    "step": "machine",
    "variant": "control",
    "verdict": "warn",
    "reason": "/dev/shm 64 MiB is smaller than the loader's need",
    "started": "2026-12-04T00:00:00",
    "details": {
        "checks": [
            {"name": "cores", "verdict": "pass", "message": "16 CPU cores for 9 busy processes"},
            {
                "name": "shared_memory",
                "verdict": "warn",
                "message": "/dev/shm 64 MiB < 4 workers × 2 × 96 MiB",
            },
        ]
    },
}


class One(App):
    def compose(self) -> ComposeResult:
        yield CountersPane()


async def test_the_machine_block_appears_with_each_check_once_the_row_exists() -> None:
    app = One()
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one(CountersPane)
        assert not app.query_one("#machine", Static).display  # nothing before the check ran
        pane.show_machine(None)
        assert not app.query_one("#machine", Static).display
        pane.show_machine(PhaseRow.from_toml(ROW))
        await pilot.pause()
        body = app.query_one("#machine", Static)
        assert body.display and app.query_one("#machine-label", Label).display
        screen = app.export_screenshot().replace("&#160;", " ")
        assert "Machine check: warn" in screen
        assert "shared_memory" in screen and "/dev/shm" in screen and "16 CPU cores" in screen
