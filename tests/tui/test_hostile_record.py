"""A hostile record: every string set to terminal escapes and Rich markup shows inert (R24).

The TUI (pilot harness, every pane) and `pilot-tui plan` must show the text as written — control
characters as visible escapes, square brackets as brackets — and never crash on markup.
"""

from __future__ import annotations

import io
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from textual.widgets import DataTable

from pilot_tui.commands.cli import main
from pilot_tui.commands.plan import print_plan
from pilot_tui.tui.app import PilotApp

from .conftest import RECORD
from .waiting import wait_for

# An OSC title rewrite, a bell, a screen clear, a bidi override, Rich markup and a markup error.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e[bold]B[/bold]run[/bold]x[red"
# What must never reach the terminal: the raw introducers of those sequences.
RAW = ("\x1b]", "\x07", "\x1b[2J", "\u202e")
# The keys a plan needs as they are (the spec is re-parsed, verdicts are enums).
KEEP = {"spec_text", "spec", "verdict", "status", "kind", "name", "precision", "stop_cause"}


def poison(value: Any, key: str = "") -> Any:
    """Every string of a record with the hostile text appended (keys the plan parses kept)."""
    if key in KEEP:
        return value
    if isinstance(value, str):
        return value + HOSTILE
    if isinstance(value, dict):
        return {k: poison(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [poison(v, key) for v in value]
    return value


def hostile_record(tmp_path: Path, everything: bool = False) -> Path:
    data = tomllib.loads(RECORD.read_text())
    data = poison(data)
    if everything:
        data["campaign"]["name"] += HOSTILE
        data["campaign"]["spec_text"] += HOSTILE
        for row in data["phases"]:
            row["verdict"] += HOSTILE
            row["name"] += HOSTILE
    # A 2 MB reason: what is rendered is bounded, so the first frame does not wait on it.
    data["phases"][0]["reason"] = "y" * 2_000_000 + HOSTILE
    path = tmp_path / "hostile.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def assert_inert(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the output"


async def test_the_dashboard_shows_a_hostile_record_inert(tmp_path: Path) -> None:
    path = hostile_record(tmp_path, everything=True)
    app = PilotApp(path)
    assert_inert(app.title + app.sub_title)
    async with app.run_test(size=(140, 40)) as pilot:
        seen = []
        for key in "12345":
            await pilot.press(key)
            await pilot.pause()
            table = app.query("#gate-table")
            if key == "1" and table:
                gates = app.query_one("#gate-table", DataTable)
                for _ in range(min(gates.row_count, 4)):
                    await pilot.press("down")
            svg = app.export_screenshot()
            assert_inert(svg)
            seen.append(svg)
        await wait_for(pilot, lambda: app.is_running, "the app to keep running")
    # No markup crash: the app ended because the test ended it, not on an exception.
    assert app.return_code in (0, None)
    shown = "".join(seen)
    # The escapes are visible, the markup is literal text.
    assert "\\x1b]0;pwned" in shown
    assert "[bold]B[/bold]run[/bold]x" in shown.replace("&#160;", " ")
    # The 2 MB reason is cut before it reaches a widget.
    first = next(iter(app.gates.values())).row.reason
    assert len(first) < 10_000 and first.endswith("more characters)")


def test_plan_prints_a_hostile_record_inert(tmp_path: Path, capsys) -> None:
    out = io.StringIO()
    print_plan(hostile_record(tmp_path), out)
    text = out.getvalue()
    assert_inert(text)
    assert "\\x1b]0;pwned" in text and "[bold]B[/bold]" in text
    # A record whose spec itself is hostile cannot be planned: one inert line, exit 2.
    (tmp_path / "all").mkdir()
    bad = hostile_record(tmp_path / "all", everything=True)
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert_inert(err)
    assert err.count("\n") == 1


def test_live_events_and_headless_lines_are_inert() -> None:
    """The live path: every runner event entering the app, and the headless line of a row."""
    from pilot_tui.commands.headless import phase_line
    from pilot_tui.core.events import PhaseFinished, RunnerError
    from pilot_tui.tui.messages import SessionFailed, wrap

    row = {
        "step": "load" + HOSTILE,
        "verdict": "fail",
        "duration_s": 1.0,
        "reason": HOSTILE * 3,
        "memory": {},
    }
    shown = wrap(PhaseFinished(step="load" + HOSTILE, row=row | {"details": {HOSTILE: [HOSTILE]}}))
    assert_inert(str(shown.event))  # str of the dataclass: every field, keys included
    assert_inert(wrap(RunnerError(message=HOSTILE, traceback=HOSTILE)).event.message)
    assert_inert(SessionFailed(HOSTILE).reason)
    line = phase_line(row, width=None)  # whole (a log file); a terminal cuts it to its width
    assert_inert(line)
    assert "\n" not in line and "[bold]B[/bold]" in line


async def test_a_crash_of_the_dashboard_exits_non_zero(saved_record: Path) -> None:
    import pilot_tui.tui.app as app_module
    from pilot_tui.commands.cli import EXIT_CRASH, tui_exit_code

    class Broken(PilotApp):
        CSS_PATH = Path(app_module.__file__).with_name("app.tcss")  # relative paths follow the subclass

        def action_help(self) -> None:
            raise RuntimeError("a bug in a key handler")

    app = Broken(saved_record)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
    except RuntimeError:
        pass  # the test harness re-raises what crashed the app
    assert app.return_code == 1
    assert tui_exit_code(None, app.return_code) == EXIT_CRASH != 0
    assert tui_exit_code(None, 0) == 0 and tui_exit_code(129, 0) == 129
