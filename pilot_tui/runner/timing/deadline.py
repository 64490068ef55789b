"""A phase's declared `time_s` enforced while it runs, not only checked after it returns (R24).

At the deadline the phase is stopped: in the runner's main thread (where phases run) a SIGALRM
raises `DeadlineExceeded` right where the code is — a `time.sleep`, a lock wait or a Python loop
in user code — and the cancel flag is set for the phases' own safe points. Code that blocks
signals and never reaches a safe point is the view's job: it kills the runner after a grace
(`pilot_tui.session.watchdog`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass


class DeadlineExceeded(BaseException):
    """The phase ran past its declared ceiling; BaseException so `except Exception` in user
    code cannot swallow it."""


@dataclass
class Deadline:
    """What happened to one phase's deadline."""

    seconds: float
    hit: bool = False
    active: bool = True


@contextlib.contextmanager
def phase_deadline(seconds: float, cancel: threading.Event) -> Iterator[Deadline]:
    """Run the body under a deadline of `seconds` (0: none)."""
    state = Deadline(seconds)
    if seconds <= 0:
        yield state
        return

    def expire() -> bool:
        if not state.active:
            return False  # the body already returned: a late alarm is not the phase's
        state.hit = True
        cancel.set()
        return True

    def on_alarm(signum: int, frame: object) -> None:
        if expire():
            raise DeadlineExceeded(f"still running at its time_s ceiling of {seconds:g} s")

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield state
        finally:
            state.active = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    else:  # not the main thread (an in-process caller): the cooperative cancel only
        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield state
        finally:
            state.active = False
            timer.cancel()
