"""A function run in a fork of the runner, its result read back later.

For work that reads what the runner holds (a captured model's structure, the task's rows) but
changes nothing the runner will use, done on the core the runner leaves idle while it goes on
(`runner/main.leave_a_core_for_the_view`). The child is a copy: nothing it does — its RNG draws,
its module hooks, what it allocates — reaches the runner, which gets back only the value, as JSON.

A fork shares the parent's CUDA context only in name (CUDA cannot be used in it): callers fork
only a runner that has not initialised CUDA (`fork_is_safe`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..machine.host import available_cores
from .lifetime import die_with_parent

_READ_BYTES = 1 << 16
KILL_WAIT_S = 5.0
# Children still running: the runner's close stops them (`close_all`).
_LIVE: set[ForkedCall] = set()


class ForkedCallFailed(Exception):
    """The child ended without a value: it raised (the message says what), or it died."""


def fork_is_safe() -> bool:
    """A fork can run torch here: Linux-style fork, and neither CUDA nor a process group started
    in this process (a child cannot use either)."""
    if not hasattr(os, "fork"):
        return False
    torch = sys.modules.get("torch")
    if torch is None:
        return True
    if torch.cuda.is_initialized():
        return False
    dist = getattr(torch, "distributed", None)
    return not (dist is not None and dist.is_available() and dist.is_initialized())


def core_to_spare() -> bool:
    """A core this process may run on that its torch threads leave idle (the runner leaves one
    for the view: `runner/main.leave_a_core_for_the_view`): work beside it gains only there."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 1
    return available_cores() > threads


class ForkedCall:
    """`fn()` started in a forked child now; `wait` returns its value (plain data: it comes back
    as JSON) or raises `ForkedCallFailed`. A thread reads the child's result and reaps it as soon
    as it ends, so no finished child lingers whether or not anyone waits for it. The child ends
    with the runner if the runner dies."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        read, write = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12 warns on any fork of a process with threads: the child below touches
            # none of the locks the runner's other threads take (it never writes the event pipe).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(fn, write)
        os.close(write)
        self.pid = pid
        self.started = time.monotonic()
        self.ended: float | None = None
        self._outcome: tuple[str, Any] = ("error", "not ended")
        self._done = threading.Event()
        self._killed = False
        _LIVE.add(self)
        threading.Thread(target=self._collect, args=(read,), daemon=True, name=f"fork-{pid}").start()

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def seconds(self) -> float | None:
        """From the fork to the child's end (None while it runs)."""
        return None if self.ended is None else self.ended - self.started

    def wait(self, tick: Callable[[float], None] | None = None, period_s: float = 0.25) -> Any:
        """The child's value, waiting for it; `tick(seconds waited)` runs every `period_s` (it may
        raise to stop waiting: the child is then killed)."""
        t0 = time.monotonic()
        try:
            while not self._done.wait(period_s):
                if tick is not None:
                    tick(time.monotonic() - t0)
        except BaseException:
            self.kill()
            raise
        kind, value = self._outcome
        if kind == "ok":
            return value
        raise ForkedCallFailed(str(value))

    def kill(self) -> None:
        """Stop the child if it still runs; returns once it is reaped (or after `KILL_WAIT_S`: a
        process the child started may still hold the pipe open)."""
        if self.running:
            self._killed = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._done.wait(KILL_WAIT_S)

    def _collect(self, fd: int) -> None:
        data = bytearray()
        with os.fdopen(fd, "rb") as pipe:
            while chunk := pipe.read(_READ_BYTES):
                data += chunk
        try:
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere: judged by what it wrote
            code = 0
        self.ended = time.monotonic()
        outcome: tuple[str, Any] | None
        try:
            outcome = tuple(json.loads(bytes(data))) if data else None  # type: ignore[assignment]
        except Exception as exc:  # cut short mid-write
            outcome = ("error", f"its result could not be read: {exc}")
        if outcome is None:
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            outcome = (
                "error",
                "stopped" if self._killed else f"the forked process ended without a result ({how})",
            )
        self._outcome = outcome
        _LIVE.discard(self)
        self._done.set()


def close_all() -> None:
    """Stop every child still running (the runner is closing: no one will read their values)."""
    for call in list(_LIVE):
        call.kill()


def _child(fn: Callable[[], Any], fd: int) -> None:
    """In the forked child: run `fn`, write ("ok", value) or ("error", why), exit. Never returns."""
    code = 1
    try:
        die_with_parent()
        # The terminal's Ctrl-C reaches the whole group: the runner decides what stops.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # The runner's stdout is its event pipe: nothing from here may reach it.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the process ends with os._exit
        try:
            data = json.dumps(["ok", fn()]).encode()
        except BaseException as exc:
            data = json.dumps(["error", f"{type(exc).__name__}: {exc}"]).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        code = 0
    finally:
        os._exit(code)
