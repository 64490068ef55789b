"""A runner on a thread of the calling process, behind the same `Link` as the real one.

For tests only: it gives no isolation (an out-of-memory or a hang here is the caller's), but it
runs the real runner code — `serve`, the phase registry, every phase body — with phases and
bodies that a test defines in its own module, which a separate process could not see.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from ..core.events import Shutdown, WireMessage
from ..session.link import LinkTimeout
from .main import leave_a_core_for_the_view, route, serve

_EOF = object()


class InProcessLink:
    """`serve()` on a thread; commands and events through queues instead of pipes."""

    def __init__(self, keep_heap: bool = False) -> None:
        # As the runner process does, freeze what the open built (runner/memory/heap.py): the
        # whole calling process's heap then, which the test hands back with `heap.hand_back()`.
        self.keep_heap = keep_heap
        self._thread: threading.Thread | None = None
        self._commands: queue.Queue[Any] = queue.Queue()
        self._events: queue.Queue[Any] = queue.Queue()
        self._cancel = threading.Event()

    @property
    def pid(self) -> int | None:
        return None

    def start(self) -> None:

        self.close()
        self._commands, self._events, self._cancel = queue.Queue(), queue.Queue(), threading.Event()
        events = self._events

        def body() -> None:
            # torch's threads as the runner process sets them (a core left for the view): the
            # rows and the fresh worker processes carry that count. Set on this thread, the
            # count leaves the caller's thread as it was (torch's CPU thread count is per thread).
            leave_a_core_for_the_view()
            try:
                serve(self._commands, events.put, self._cancel, {}, self.keep_heap)
            finally:
                events.put(_EOF)

        self._thread = threading.Thread(target=body, daemon=True, name="in-process-runner")
        self._thread.start()

    def send(self, msg: WireMessage) -> None:

        route(msg, self._commands, self._cancel)

    def receive(self, timeout: float) -> WireMessage | None:
        try:
            item = self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise LinkTimeout(f"no message from the runner in {timeout:g} s") from None
        if item is _EOF:
            self._events.put(_EOF)
            return None
        return item

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def exit_status(self) -> str:
        return "" if self.alive() else "thread ended"

    def stderr_tail(self) -> list[str]:
        return []

    def kill(self) -> None:
        # A thread cannot be killed: cancel the phase and ask the loop to end after it.
        self._cancel.set()
        self._commands.put(Shutdown())

    def close(self, timeout: float = 5.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._cancel.set()
        self._commands.put(Shutdown())
        thread.join(timeout)
