"""The link between a view and its runner: spawn, send, receive with a deadline, liveness.

`Session` is given a link and never touches a pipe itself, so the same session code runs over:
- `ProcessLink`: the real runner, a separate process that owns torch (JSON lines over pipes);
- `ReplayLink`: a recorded event stream, for deterministic TUI tests and screenshots;
- `RecordingLink`: any link, with every command and event written to a recording file.

No read waits without a bound: `receive(timeout)` returns a message, raises `LinkTimeout` when
nothing arrived in time, or returns None once the runner is gone and everything it sent is read.
This module imports no torch.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from ..core import events as ev
from ..core.launch import module_command

STDERR_LINES = 40


class LinkTimeout(Exception):
    """Nothing arrived from the runner within the deadline (it may still be alive and busy)."""


class Link(Protocol):
    """What a session needs from its runner, whatever carries the messages."""

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None:
        """Start a runner (a fresh one if one ran before)."""

    def send(self, msg: ev.WireMessage) -> None:
        """Send a command; a runner that is gone is not an error here (receive reports it)."""

    def receive(self, timeout: float) -> ev.WireMessage | None:
        """The next event; None once the runner is gone; LinkTimeout after `timeout` seconds."""

    def alive(self) -> bool: ...

    def exit_status(self) -> str:
        """How the runner ended, in words ("signal 9", "exit code 1"); "" while it runs."""

    def stderr_tail(self) -> list[str]:
        """The last lines the runner wrote to its stderr (user prints, tracebacks)."""

    def kill(self) -> None:
        """End the runner now (a cancel it did not honour, a phase past its deadline)."""

    def close(self, timeout: float = 5.0) -> None:
        """Ask the runner to exit, then make sure it did: no orphan process is left."""


_EOF = object()


class ProcessLink:
    """The runner as a child process: `python -m pilot_tui.runner.main`, JSON lines over pipes.

    A reader thread turns stdout lines into a queue, so every receive has a deadline; another
    drains stderr into a short tail that failure rows quote.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = env
        self._proc: subprocess.Popen[str] | None = None
        self._events: queue.Queue[Any] = queue.Queue()
        self._write_lock = threading.Lock()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._status = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        self.close()
        env = dict(os.environ if self._env is None else self._env, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            module_command("pilot_tui.runner.main"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
            # Its own session, so its own scheduler autogroup on Linux: in the view's, the busy
            # training thread took the dashboard's CPU share and keys waited. It still
            # dies with the view (PR_SET_PDEATHSIG in runner/processes/lifetime.py) and is closed by it.
            start_new_session=True,
        )
        # A fresh queue per process: a late line of the previous runner never reaches this one.
        self._events, self._status = queue.Queue(), ""
        self._stderr.clear()
        self._proc = proc
        threading.Thread(target=self._read, args=(proc, self._events), daemon=True, name="runner-out").start()
        threading.Thread(target=self._drain_stderr, args=(proc,), daemon=True, name="runner-err").start()

    def _read(self, proc: subprocess.Popen[str], events: queue.Queue[Any]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if not line.strip():
                    continue
                try:
                    events.put(ev.decode(line))
                except Exception:
                    events.put(ev.RunnerError(message=f"unreadable runner output: {line[:200]!r}"))
        except (OSError, ValueError):
            pass  # the pipe was closed under us: the runner is gone
        events.put(_EOF)

    def _drain_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                self._stderr.append(line.rstrip())
        except (OSError, ValueError):
            pass

    def send(self, msg: ev.WireMessage) -> None:
        with self._write_lock:
            proc = self._proc
            if proc is None or proc.stdin is None:
                return
            try:
                proc.stdin.write(msg.to_json() + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the runner is gone; receive sees the end of its output and reports it

    def receive(self, timeout: float) -> ev.WireMessage | None:
        try:
            item = self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise LinkTimeout(f"no message from the runner in {timeout:g} s") from None
        if item is _EOF:
            self._events.put(_EOF)  # every later receive sees the end too
            self._reap()
            return None
        return item

    def _reap(self) -> None:
        proc = self._proc
        if proc is None or self._status:
            return
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # Its stdout is closed but it lingers (a thread stuck in user code): it is ended.
            proc.kill()
            code = proc.wait()
        self._status = f"signal {-code}" if code < 0 else f"exit code {code}"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_status(self) -> str:
        return self._status

    def stderr_tail(self) -> list[str]:
        return list(self._stderr)

    def kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with self._write_lock:
            try:
                if proc.stdin:
                    proc.stdin.write(ev.Shutdown().to_json() + "\n")
                    proc.stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                with contextlib.suppress(OSError):
                    stream.close()


class RecordingLink:
    """Any link, with the commands sent (`open`, `run`, `cancel`) and every event received written
    to `stream` as JSON lines: a recording `ReplayLink` plays back."""

    def __init__(self, inner: Link, stream: TextIO, record_id: str) -> None:
        self.inner = inner
        self._stream = stream
        stream.write(json.dumps({"kind": "recording", "record_id": record_id}) + "\n")

    @property
    def pid(self) -> int | None:
        return self.inner.pid

    def start(self) -> None:
        self.inner.start()

    def send(self, msg: ev.WireMessage) -> None:
        if isinstance(msg, ev.OpenCampaign | ev.RunStep | ev.Cancel):
            self._stream.write(msg.to_json() + "\n")
        self.inner.send(msg)

    def receive(self, timeout: float) -> ev.WireMessage | None:
        msg = self.inner.receive(timeout)
        if msg is not None:
            self._stream.write(msg.to_json() + "\n")
        return msg

    def alive(self) -> bool:
        return self.inner.alive()

    def exit_status(self) -> str:
        return self.inner.exit_status()

    def stderr_tail(self) -> list[str]:
        return self.inner.stderr_tail()

    def kill(self) -> None:
        self.inner.kill()

    def close(self, timeout: float = 5.0) -> None:
        self.inner.close(timeout)


class ReplayLink:
    """A runner played back from a recording: same session code, no process, no torch.

    Re-running a step replays its next recorded attempt (or the last one again); a step with no
    recording answers with a runner error. `delay_s` spaces the events out (for demos).
    """

    def __init__(self, recording: str | Path, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.record_id = ""
        self._opening: list[str] = []
        self._by_step: dict[str, list[list[str]]] = collections.defaultdict(list)
        self._pending: collections.deque[str] = collections.deque()
        self._cancelled = False
        self._load(Path(recording))

    def _load(self, path: Path) -> None:
        group: list[str] | None = self._opening
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            data: dict[str, Any] = json.loads(line)
            kind = data.get("kind")
            if kind == "recording":
                # The recorded id, so a replayed record has the same name as the original.
                self.record_id = str(data["record_id"])
            elif kind == "open":
                group = self._opening
            elif kind == "run":
                group = []
                self._by_step[data["step"]].append(group)
            elif kind == "cancel":
                continue
            elif group is not None:
                group.append(line)

    @property
    def pid(self) -> int | None:
        return None

    def start(self) -> None:
        self._pending.clear()

    def send(self, msg: ev.WireMessage) -> None:
        if isinstance(msg, ev.OpenCampaign):
            self._pending.extend(self._opening)
        elif isinstance(msg, ev.RunStep):
            self._cancelled = False
            groups = self._by_step.get(msg.step)
            if groups:
                self._pending.extend(groups.pop(0) if len(groups) > 1 else groups[0])
            else:
                self._pending.append(ev.RunnerError(message=f"no recorded events for {msg.step!r}").to_json())
                self._pending.append(ev.Idle().to_json())
        elif isinstance(msg, ev.Cancel):
            self._cancelled = True

    def receive(self, timeout: float) -> ev.WireMessage | None:
        if not self._pending:
            # A recording that ends mid-step is a runner that went away.
            return None
        if self.delay_s:
            time.sleep(min(self.delay_s, timeout))
        msg = ev.decode(self._pending.popleft())
        if self._cancelled and isinstance(msg, ev.PhaseProgress):
            # Skip to the end of the step, as a cancelled runner would.
            while self._pending and json.loads(self._pending[0]).get("kind") == ev.PhaseProgress.kind:
                self._pending.popleft()
        return msg

    def alive(self) -> bool:
        return True

    def exit_status(self) -> str:
        return ""

    def stderr_tail(self) -> list[str]:
        return []

    def kill(self) -> None:
        self._pending.clear()

    def close(self, timeout: float = 5.0) -> None:
        self._pending.clear()
