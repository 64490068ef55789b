"""The view side of a pilot: spawns the runner process, sends commands, keeps the record.

Shared by the headless CLI and the TUI. It imports no torch: the runner process owns torch and
the GPU, so an out-of-memory, a crash or a hang there can never take a view down. The record is
written here, atomically, after every phase, so a kill of the runner loses nothing recorded.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .events import (
    BadInput,
    Cancel,
    Idle,
    Message,
    OpenCampaign,
    PhaseFinished,
    PhaseStarted,
    RecordUpdate,
    RunnerError,
    RunnerReady,
    RunStep,
    Shutdown,
    decode,
)
from .record import LIST_SECTIONS, Record, new_record_id
from .spec import LoadedSpec, load_spec
from .steps import Step, campaign_steps

CANCEL_GRACE_S = 10.0


class BadInputError(Exception):
    """The campaign cannot run as declared; the message is one line (exit code 2)."""


def sweep_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files left by a writer that was killed mid-write (their pid is dead)."""
    removed = []
    if not folder.is_dir():
        return removed
    for tmp in folder.glob(".*.tmp"):
        parts = tmp.name.split(".")
        pid = next((int(p) for p in parts if p.isdigit()), None)
        if pid is not None and pid != os.getpid() and _alive(pid):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Session:
    """One campaign run: a runner process plus the record it fills."""

    def __init__(self, spec_path: str | Path, records_dir: str | Path | None = None) -> None:
        self.loaded: LoadedSpec = load_spec(spec_path)  # SpecError: bad input, nothing written
        self.spec = self.loaded.spec
        self.steps: list[Step] = campaign_steps(self.spec)
        self.records_dir = Path(records_dir) if records_dir else self.loaded.path.parent / "records"
        self.record_id = new_record_id()
        stem = f"{self.spec.campaign.name}-{self.record_id}"
        self.work_dir = self.records_dir / stem
        self.record: Record | None = None
        self.ready: RunnerReady | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._write_lock = threading.Lock()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._killed_for_cancel = False
        self._cancel_timer: threading.Timer | None = None

    # ------------------------------------------------------------------ runner lifecycle

    @property
    def runner_pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _spawn(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pilot_tui.runner.main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        threading.Thread(
            target=self._drain_stderr, args=(self._proc,), daemon=True, name="runner-stderr"
        ).start()

    def _drain_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._stderr_tail.append(line.rstrip())

    def _send(self, msg: Message) -> None:
        with self._write_lock:
            if self._proc is None or self._proc.stdin is None:
                return
            try:
                self._proc.stdin.write(msg.to_json() + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the runner is gone; the reader sees EOF and reports it

    def _next(self) -> Message | None:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            return None
        try:
            return decode(line)
        except Exception:
            return RunnerError(message=f"unreadable runner output: {line[:200]!r}")

    def start(self) -> RunnerReady:
        """Start the runner and open the campaign; the record file appears only on success."""
        sweep_stale_temp_files(self.records_dir)
        self._spawn()
        self._send(OpenCampaign(spec_path=str(self.loaded.path), work_dir=str(self.work_dir)))
        while True:
            msg = self._next()
            if msg is None:
                tail = "; ".join(list(self._stderr_tail)[-3:])
                self.close()
                raise BadInputError(
                    f"{self.loaded.path}: the runner exited while opening the campaign: {tail}"
                )
            if isinstance(msg, BadInput):
                self.close()
                raise BadInputError(msg.message)
            if isinstance(msg, RunnerReady):
                break
        self._wait_idle()
        if self.record is None:
            self.ready = msg
            self.record = Record.create(
                self.records_dir,
                record_id=self.record_id,
                name=self.spec.campaign.name,
                spec_path=self.loaded.path,
                spec_text=self.loaded.text,
                spec_sha256=self.loaded.sha256,
                spec_raw=self.loaded.raw,
                environment=msg.environment,
                accounting=msg.dataset.pop("accounting"),
                dataset=msg.dataset,
            )
            self.record.save()
        return msg

    def _wait_idle(self) -> None:
        while True:
            msg = self._next()
            if msg is None or isinstance(msg, Idle):
                return

    def close(self, timeout: float = 5.0) -> None:
        """Ask the runner to exit, then make sure it did: no orphan process is left."""
        if self._cancel_timer:
            self._cancel_timer.cancel()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.write(Shutdown().to_json() + "\n")
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
                stream.close()

    # ------------------------------------------------------------------ commands

    def step(self, key: str) -> Step:
        for s in self.steps:
            if s.key == key:
                return s
        phase, _, variant = key.partition("@")
        return Step(key=key, phase=phase, variant=variant or "control")

    def run_step(self, key: str, overrides: dict[str, Any] | None = None) -> Iterator[Message]:
        """Run one step; yield every event until the runner is idle again.

        The row is appended and the record saved *before* the PhaseFinished event is yielded, so
        whatever a view shows as finished is already on disk.
        """
        if self.record is None:
            raise RuntimeError("start() the session first")
        if self._proc is None or self._proc.poll() is not None:
            self._restart()
        self._killed_for_cancel = False
        self._send(RunStep(step=key, overrides=dict(overrides or {})))
        started: PhaseStarted | None = None
        while True:
            msg = self._next()
            if msg is None:
                yield self._runner_died(key, started)
                return
            if isinstance(msg, PhaseStarted):
                started = msg
            elif isinstance(msg, PhaseFinished):
                self.record.append("phases", msg.row)
                self.record.save()
            elif isinstance(msg, RecordUpdate):
                self.apply_update(msg)
            if isinstance(msg, Idle):
                if self._cancel_timer:
                    self._cancel_timer.cancel()
                return
            yield msg

    def apply_update(self, msg: RecordUpdate) -> None:
        assert self.record is not None
        if msg.section in LIST_SECTIONS:
            self.record.append(msg.section, msg.value)
        else:
            self.record.set_section(msg.section, msg.value)
        self.record.save()

    def _runner_died(self, key: str, started: PhaseStarted | None) -> PhaseFinished:
        proc = self._proc
        code = proc.wait() if proc else None
        self.close()
        step = self.step(key)
        if self._killed_for_cancel:
            reason = f"cancelled; the runner did not stop within {CANCEL_GRACE_S:g} s and was killed"
        else:
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            reason = f"the runner process died ({how}) during {step.phase}; the next step starts a new one"
        row = {
            "name": step.phase,
            "step": key,
            "variant": step.variant,
            "verdict": "fail",
            "reason": reason,
            "duration_s": 0.0,
            "params": started.params if started else {},
            "memory": {},
            "details": {"runner_stderr": list(self._stderr_tail)[-10:]},
        }
        assert self.record is not None
        self.record.append("phases", row)
        self.record.save()
        return PhaseFinished(step=key, row=row)

    def _restart(self) -> None:
        self.close()
        self._spawn()
        self._send(OpenCampaign(spec_path=str(self.loaded.path), work_dir=str(self.work_dir)))
        while True:
            msg = self._next()
            if msg is None or isinstance(msg, BadInput):
                raise BadInputError(getattr(msg, "message", "the runner could not restart"))
            if isinstance(msg, RunnerReady):
                break
        self._wait_idle()

    def cancel(self) -> None:
        """Ask the running phase to stop; kill the runner if it does not within the grace period."""
        self._send(Cancel())
        proc = self._proc
        if proc is None:
            return

        def force() -> None:
            if proc.poll() is None:
                self._killed_for_cancel = True
                proc.kill()

        if self._cancel_timer:
            self._cancel_timer.cancel()
        self._cancel_timer = threading.Timer(CANCEL_GRACE_S, force)
        self._cancel_timer.daemon = True
        self._cancel_timer.start()

    def run_all(self) -> Iterator[Message]:
        for step in self.steps:
            yield from self.run_step(step.key)
