"""The view side of a pilot: spawns the runner process, sends commands, keeps the record.

Shared by the headless CLI and the TUI. It imports no torch: the runner process owns torch and
the GPU, so an out-of-memory, a crash or a hang there can never take a view down. The record is
written here, atomically, after every phase, so a kill of the runner loses nothing recorded.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import board
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
from .hashing import sha256_file
from .record import LIST_SECTIONS, Record, new_record_id
from .spec import LoadedSpec, load_spec
from .steps import Step, campaign_steps

CANCEL_GRACE_S = 10.0


class BadInputError(Exception):
    """The campaign cannot run as declared; the message is one line (exit code 2)."""


# `.<target name>.<writer pid>.<mkstemp suffix>.tmp`, as record.write_atomic and the runner's
# checkpoint writer name them; the target name may itself hold dots and digits.
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[^.]+\.tmp")


def sweep_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files left by a writer that was killed mid-write (their pid is dead).

    Covers the records folder and the artifact folders beside the records (a runner killed
    during a checkpoint save leaves its temp file there). A live writer's temp file is kept.
    """
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for tmp in [*folder.glob(".*.tmp"), *folder.glob("*/.*.tmp")]:
        match = _TEMP_NAME.fullmatch(tmp.name)
        if match is None:
            continue  # not one of ours
        # Our own pid counts as alive: another session in this process may be mid-write.
        if _alive(int(match["pid"])):
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
        # The key of the step in flight: a cancel (and its kill timer) belongs to that step only.
        self._running: str | None = None

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
            if self.spec.task.file:
                # The user's task code is part of what ran: keep its provenance beside the spec's.
                task_file = self.loaded.resolve(self.spec.task.file)
                self.record.data["campaign"]["task_file"] = {
                    "path": str(task_file),
                    "sha256": sha256_file(task_file),
                }
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
        if self._cancel_timer:
            self._cancel_timer.cancel()  # a late cancel of the previous step must not kill this one
        self._killed_for_cancel = False
        self._running = key
        overrides, pending_run = self._lr_run_attempt(key, dict(overrides or {}))
        self._send(RunStep(step=key, overrides=overrides))
        started: PhaseStarted | None = None
        resent = False
        while True:
            msg = self._next()
            if msg is None and started is None and not resent:
                # The runner was already dying when the step was sent (killed while idle: a
                # multi-threaded process can take a moment to be reaped): the step never began,
                # so it runs in a new runner instead of being recorded as a crash. Once only.
                resent = True
                self._restart()
                self._send(RunStep(step=key, overrides=overrides))
                continue
            if msg is None:
                self._running = None
                died = self._runner_died(key, started)
                if pending_run:
                    # Yielded too, so a view drops the run's live "running" state for the row.
                    yield self._lost_run(
                        pending_run, str(overrides.get("retry_of", "")), str(died.row["reason"])
                    )
                yield died
                return
            if isinstance(msg, RecordUpdate) and msg.section == "runs":
                pending_run = ""
            if isinstance(msg, PhaseStarted):
                started = msg
            elif isinstance(msg, PhaseFinished):
                self.record.append("phases", msg.row)
                self.record.save()
            elif isinstance(msg, RecordUpdate):
                msg = self.apply_update(msg)
            if isinstance(msg, Idle):
                self._running = None
                if self._cancel_timer:
                    self._cancel_timer.cancel()
                return
            yield msg

    def apply_update(self, msg: RecordUpdate) -> RecordUpdate:
        """Keep `msg` in the record and save; returns it as recorded (a run may get a new id)."""
        assert self.record is not None
        value = msg.value
        if msg.section == "runs":
            # A run id is never reused: a row claiming a taken id is kept under the next one.
            value = board.unique_run(self.record.data.get("runs", []), value)
        if msg.section in LIST_SECTIONS:
            self.record.append(msg.section, value)
        else:
            self.record.set_section(msg.section, value)
        if msg.section == "runs":
            self._update_board()
        self.record.save()
        return msg if value is msg.value else RecordUpdate(section=msg.section, value=value)

    # ------------------------------------------------------------------ LR board (R13, R14)

    def _lr_run_attempt(self, key: str, overrides: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Overrides for an LR run with its attempt number, and the id it will get ("" otherwise).

        Only the session sees the record, so it numbers attempts: one past the highest ever
        recorded for this run name, with `retry_of` naming that attempt.
        """
        step = self.step(key)
        if step.phase != "lr_run" or self.record is None:
            return overrides, ""
        attempt, retry_of = board.next_attempt(self.record.data.get("runs", []), step.variant)
        overrides |= {"attempt": attempt, "retry_of": retry_of}
        try:
            # So that the phase's announced params already show the run's own LR and seed; a
            # conflicting value the caller gave is kept, and the runner refuses it.
            lr, seed = board.parse_run_name(step.variant)
            overrides.setdefault("lr", lr)
            overrides.setdefault("seed", seed)
        except ValueError:
            pass  # not an LR run name: the runner refuses it with the reason
        return overrides, f"{step.variant}-{attempt}"

    def _lost_run(self, run_id: str, retry_of: str, reason: str) -> RecordUpdate:
        """The runner died inside an LR run: the run still gets its row, status failed (R14)."""
        assert self.record is not None
        row: dict[str, Any] = {
            "id": run_id,
            "retry_of": retry_of,
            # Killed because it did not stop when asked: the user's cancel, not a crash.
            "status": "cancelled" if self._killed_for_cancel else "failed",
            "stop_cause": "runner_died",
            "reason": reason,
        }
        try:
            lr, seed = board.parse_run_name(board.split_run_id(run_id)[0])
            row |= {"lr": lr, "seed": seed}
        except ValueError:
            pass
        row |= {"spec_sha256": self.loaded.sha256, "losses": [], "validation": []}
        return self.apply_update(RecordUpdate(section="runs", value=row))

    def _update_board(self) -> None:
        """Recompute `[board]` from every `[[runs]]` row: it survives runner restarts and retries."""
        assert self.record is not None
        declared = self.spec.lr_board
        if declared is None:
            return
        value = board.compare(
            self.record.data.get("runs", []), declared.control, [declared.control, *declared.variants]
        )
        self.record.set_section("board", value)

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
        proc, key = self._proc, self._running
        if proc is None or key is None:
            return  # nothing in flight: the runner clears the flag when the next phase starts

        def force() -> None:
            # Only if that same step is still running: it may have ended within the grace period.
            if proc.poll() is None and self._running == key:
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

    def finish(self) -> dict[str, Any]:
        """Compute the choice sheet and package plan from the record's rows and keep them as `[plan]`.

        Called at the end of a campaign (R18, R19). A plan that cannot be computed is kept as
        `[plan] error = "..."` rather than lost: every row is already on disk either way.
        """
        from .plan import compute_plan

        if self.record is None:
            raise RuntimeError("start() the session first")
        try:
            plan = compute_plan(self.record.data)
        except Exception as exc:  # the rows are on disk; a planning bug must not hide them
            plan = {"error": f"{type(exc).__name__}: {exc}"}
        self.record.set_section("plan", plan)
        self.record.save()
        return plan
