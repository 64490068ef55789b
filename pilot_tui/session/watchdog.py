"""The view's last resort against a hung phase: kill the runner a grace after the deadline.

The runner stops a phase at its declared `time_s` itself (`runner/timing/deadline.py`); code that
ignores that (signals blocked, stuck in C) is killed from here, and the session records a row
that says the phase hung. Pure: a timer and a callable, no torch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .settings import Settings


class HangWatchdog:
    """Arm at a phase's start with its `time_s`; `kill` runs if it is still armed after it + grace."""

    def __init__(self, kill: Callable[[], None], grace_s: float = Settings.hung_grace_s) -> None:
        self._kill = kill
        self.grace_s = grace_s
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.key: str | None = None
        # Set when the watchdog killed the runner: the reason the phase's row gives.
        self.fired = ""

    def arm(self, key: str, time_s: float) -> None:
        """Watch step `key`, declared to take at most `time_s` (0: not watched)."""
        self.disarm()
        self.fired = ""
        if time_s <= 0:
            return
        with self._lock:
            self.key = key
            self._timer = threading.Timer(time_s + self.grace_s, self._fire, args=(key, time_s))
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        """The phase ended (or the runner is gone): nothing to kill."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
            self.key = None

    def _fire(self, key: str, time_s: float) -> None:
        with self._lock:
            if self.key != key:
                return  # disarmed meanwhile
            self.key = None
            self.fired = (
                f"hung: still running {time_s + self.grace_s:g} s after it started, past its time_s "
                f"ceiling of {time_s:g} s, and it did not stop at the deadline; the runner was killed"
            )
        self._kill()
