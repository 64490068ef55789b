"""The runner thread: the body of the dashboard's one thread that talks to the runner.

It owns the data source (a `Session`, or a replay of a recorded event stream) for its whole life:
starts it, runs the steps the UI queues, posts every event as a Textual message, and closes it
(no orphan runner) when told to stop. Only this thread touches the session's record while it
runs; the UI thread only queues commands and calls `cancel()`, which just writes to the pipe.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from textual.message import Message

from ..core import events as ev
from ..core import phase_table
from ..core.record import Record
from ..core.rows import PhaseRow
from ..core.steps import Step
from ..session.settings import Settings
from .messages import CampaignStopped, RecordSaved, RunnerIdle, SessionFailed, SessionReady, wrap


class Source(Protocol):
    """What the dashboard needs from a data source; `pilot_tui.session.Session` is one."""

    steps: list[Step]
    record: Record | None
    record_id: str
    settings: Settings

    def start(self) -> ev.RunnerReady: ...
    def run_step(self, key: str, overrides: dict[str, Any] | None = None) -> Iterator[ev.WireMessage]: ...
    def cancel(self, key: str | None = None) -> None: ...
    def close(self, timeout: float = 5.0) -> None: ...


@dataclass(frozen=True)
class Command:
    """A queued request: run one step (with overrides), or write the record."""

    kind: str  # "step" | "save" | "plan" | "call"
    key: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    fn: Callable[[Record | None], Any] | None = None


class RunnerThread:
    """Queue of commands plus the thread body that executes them in order."""

    def __init__(self, source: Source, post: Callable[[Message], Any]) -> None:
        self.source = source
        self._post = post
        self._queue: collections.deque[Command] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self.current: str | None = None
        self.ready = False
        self.done = threading.Event()

    # ------------------------------------------------------------------ UI-thread side

    @property
    def busy(self) -> bool:
        return self.current is not None

    def pending(self) -> list[str]:
        with self._cond:
            return [c.key for c in self._queue if c.kind == "step"]

    def submit(self, keys: Iterable[str], overrides: dict[str, Any] | None = None) -> list[str]:
        """Queue steps to run in order; returns the keys queued."""
        keys = list(keys)
        with self._cond:
            for key in keys:
                self._queue.append(Command("step", key, dict(overrides or {})))
            self._cond.notify()
        return keys

    def save_record(self) -> None:
        """Refresh the plan and write the record now if idle, or right after the running step."""
        with self._cond:
            self._queue.appendleft(Command("save"))
            self._cond.notify()

    def plan(self) -> None:
        """Recompute the record's `[plan]` from the rows so far (after the last step)."""
        with self._cond:
            self._queue.append(Command("plan"))
            self._cond.notify()

    def call(self, fn: Callable[[Record | None], Any]) -> None:
        """Run `fn(record)` on the worker thread, between steps, so it never races a save."""
        with self._cond:
            self._queue.appendleft(Command("call", fn=fn))
            self._cond.notify()

    def clear(self) -> list[str]:
        """Drop every queued step (not the running one); returns their keys."""
        with self._cond:
            dropped = [c.key for c in self._queue if c.kind == "step"]
            self._queue = collections.deque(c for c in self._queue if c.kind != "step")
            return dropped

    def cancel(self) -> list[str]:
        """Cancel the running step and drop the queued ones (a cancel stops `run all` too)."""
        dropped = self.clear()
        key = self.current
        if key is not None:
            self.source.cancel(key)  # the session re-sends it when the phase starts, if need be
        return dropped

    def stop(self) -> None:
        """Ask the thread to finish: cancel what runs, then close the source."""
        with self._cond:
            self._stop = True
            self._queue.clear()
            self._cond.notify()
        if self.current is not None:
            self.source.cancel(self.current)

    # ------------------------------------------------------------------ worker-thread side

    def _next(self) -> Command | None:
        with self._cond:
            while not self._queue and not self._stop:
                self._cond.wait()
            if self._stop:
                return None
            return self._queue.popleft()

    def run(self) -> None:
        """Thread body: start the source, then execute queued commands until `stop()`."""
        try:
            try:
                ready = self.source.start()
            except Exception as exc:
                self._post(SessionFailed(str(exc), dropped=self.clear()))
                return
            record = self.source.record
            self.ready = True
            self._post(SessionReady(record.path if record else Path(), dict(ready.environment)))
            while (cmd := self._next()) is not None:
                if cmd.kind == "save":
                    self._save_record()
                    continue
                if cmd.kind == "plan":
                    self._plan()
                    continue
                if cmd.kind == "call" and cmd.fn is not None:
                    try:
                        cmd.fn(self.source.record)
                    except Exception as exc:
                        # Not a runner failure: the queued steps still run.
                        self._post(RecordSaved(None, f"{type(exc).__name__}: {exc}"))
                    continue
                self.current = cmd.key
                try:
                    for event in self.source.run_step(cmd.key, cmd.overrides):
                        msg = wrap(event)
                        if msg is not None:
                            self._post(msg)
                        if isinstance(event, ev.PhaseFinished):
                            self._fail_fast(event)
                except Exception as exc:  # a runner that cannot restart; the UI keeps going
                    # The queued steps would fail the same way: drop them, and say which (this
                    # one too: it has no row, so the view shows it waiting again).
                    self._post(SessionFailed(f"{cmd.key}: {exc}", dropped=[cmd.key, *self.clear()]))
                finally:
                    self.current = None
                with self._cond:
                    idle = not self._queue
                if idle:
                    self._post(RunnerIdle())
        finally:
            try:
                self.source.close()
            finally:
                self.done.set()

    def _fail_fast(self, event: ev.PhaseFinished) -> None:
        """A failed stack check stops "run all" exactly as it stops headless (R18: fail fast)."""
        row = PhaseRow.from_toml(event.row)
        if row is not None and phase_table.stops_campaign(row.name, row.verdict):
            dropped = self.clear()
            if dropped:
                self._post(CampaignStopped(f"{row.name} failed: later steps not run ({row.reason})", dropped))

    def _plan(self) -> None:
        finish = getattr(self.source, "finish", None)
        if self.source.record is None or finish is None:
            return
        plan = finish()  # saves the record; a planning error is kept in [plan] error
        msg = wrap(ev.RecordUpdate(section="plan", value=plan))
        if msg is not None:
            self._post(msg)

    def _save_record(self) -> None:
        record = self.source.record
        if record is None:
            self._post(RecordSaved(None, "no record yet: the runner has not started"))
            return
        try:
            self._plan()
            self._post(RecordSaved(record.save()))
        except Exception as exc:
            self._post(RecordSaved(record.path, str(exc)))
