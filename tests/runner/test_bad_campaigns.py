"""Bad campaigns end with exit code 2, one line naming the file and the key or line, no record.

Every runner-side case (task file, factory, data) is checked in-process through the runner's own
open path; a representative subset of all bad fixtures goes through the real CLI process.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO

from pilot_tui.core.events import OpenCampaign

BAD = REPO / "tests" / "data" / "bad"

# Valid specs whose task file or data is bad: the runner reports BadInput.
RUNNER_CASES: dict[str, tuple[str, ...]] = {
    "task_syntax_error.toml": ("tasks/syntax_error.py: import failed: SyntaxError", "line 4"),
    "task_import_error.toml": ("tasks/import_error.py: import failed (line 3): ModuleNotFoundError",),
    "task_raises.toml": ("tasks/raises.py: make_task() raised (line 6): FileNotFoundError",),
    "task_not_a_task.toml": ("tasks/not_a_task.py: make_task() returned dict, not a Task",),
    "task_empty.toml": ("tasks/empty.py: the task has no examples",),
    "task_no_group_key.toml": ("tasks/no_group_key.py: example 0 has no group key field 'group'",),
    "task_no_function.toml": ("tasks/raises.py: no function 'build_it'", "task.function"),
    "too_small.toml": ("too_small.toml: batch:", "fewer than one update of 2 × 64 × 1 = 128"),
    "unknown_builtin.toml": ("task.builtin: unknown built-in task 'translate'",),
    "builtin_option_float.toml": (
        "builtin_option_float.toml: line 7: task.options.n_conversations: expected an integer, got 40.5",
    ),
    "builtin_option_huge.toml": (
        "builtin_option_huge.toml: line 10: task.options.n_conversations: 1000000000 is outside [1, 200000]",
        "the built-in instruct",
    ),
}
# Through the real CLI: spec errors (no runner started) and runner errors (one runner start each).
CLI_CASES: dict[str, str] = {
    "syntax_error.toml": "line 11",
    "unknown_key.toml": "batch.micro_batch",
    "wrong_type.toml": "batch.microbatch",
    "missing_task_file.toml": "task.file",
    "task_syntax_error.toml": "SyntaxError",
    "task_raises.toml": "make_task() raised",
    "too_small.toml": "batch:",
}


def open_in_runner(spec: Path, work_dir: Path) -> list[dict]:
    """The runner's open path, in this process: the events it would send to the view."""
    from pilot_tui.runner.main import Channel, open_campaign

    out = io.StringIO()
    open_campaign(
        OpenCampaign(spec_path=str(spec), work_dir=str(work_dir)), Channel(out).emit, threading.Event()
    )
    # What it says while it opens (events.Opening) precedes its answer.
    return [e for e in map(json.loads, out.getvalue().splitlines()) if e["kind"] != "opening"]


@pytest.mark.parametrize("name", sorted(RUNNER_CASES))
def test_runner_reports_bad_task_or_data(name, tmp_path):
    events = open_in_runner(BAD / name, tmp_path / "work")
    assert [e["kind"] for e in events] == ["bad_input"]
    message = events[0]["message"]
    assert "\n" not in message
    for fragment in RUNNER_CASES[name]:
        assert fragment in message, message
    assert not any(tmp_path.iterdir()), "the runner wrote something for a bad campaign"


def test_the_twin_of_the_bad_builtin_options_opens(tmp_path):
    events = open_in_runner(BAD / "builtin_option_ok.toml", tmp_path / "work")
    assert "bad_input" not in [e["kind"] for e in events], events


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_exit_2_one_line_nothing_written(name, tmp_path):
    records = tmp_path / "records"
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(BAD / name), "--headless", "--records", str(records)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pilot-tui: error: "), proc.stderr
    assert CLI_CASES[name] in lines[0]
    assert not records.exists() or not any(records.iterdir())
