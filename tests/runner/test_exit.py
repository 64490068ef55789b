"""The runner process ends at once when the view closes it, yet runs what a normal exit runs.

It skips the interpreter's teardown (freeing every module one by one: ~0.1 s that the session's
close waits for), not the atexit handlers a task or a library registered: their clean-up (a
temporary folder's removal, logging's flush, a file the user's code writes last) still happens.
"""

from __future__ import annotations

from pathlib import Path

from pilot_tui.session.driver import Session

TASK = """
import atexit
from pathlib import Path

from pilot_tui.tasks import demo_instruct


def make_task(marker="", **options):
    atexit.register(lambda: Path(marker).write_text("the task's atexit handler ran"))
    return demo_instruct.make_task(**options)
"""


def test_the_runner_runs_the_atexit_handlers_of_the_task_when_it_ends(write_campaign, tmp_path: Path) -> None:
    (tmp_path / "exit_task.py").write_text(TASK)
    marker = tmp_path / "marker.txt"
    path = write_campaign(
        {"task": {"builtin": "", "file": "exit_task.py", "options": {"marker": str(marker)}}}
    )
    session = Session(path, tmp_path / "records")
    session.start()
    pid = session.runner_pid
    session.close()
    assert pid is not None and not session.link.alive()
    assert marker.read_text() == "the task's atexit handler ran"
