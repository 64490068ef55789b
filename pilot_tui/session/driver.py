"""The view side of a pilot: a runner link, the commands sent over it, and the record it fills.

Shared by the headless CLI and the TUI. It imports no torch: the runner owns torch and the GPU
behind a `Link` (a process, or a recording in tests), so an out-of-memory, a crash or a hang
there can never take a view down. The record is written here, atomically, after every phase,
so a kill of the runner loses nothing recorded.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import default_records_dir
from ..analysis import board
from ..analysis.plan import compute_plan
from ..core.atomic import sweep_stale_temp_files
from ..core.events import (
    BadInput,
    Cancel,
    Counters,
    Idle,
    OpenCampaign,
    Opening,
    PhaseFinished,
    PhaseStarted,
    RecordUpdate,
    RunnerError,
    RunnerReady,
    RunStep,
    WireMessage,
)
from ..core.hashing import sha256_file
from ..core.reasons import first_line
from ..core.record import LIST_SECTIONS, Record, new_record_id
from ..core.rows import PhaseRow, phase_row, read_rows
from ..core.spec import LoadedSpec, load_spec
from ..core.steps import Step, campaign_steps, find_step
from ..core.verdict import FAIL
from .death import death_reason, oom_kills
from .link import Link, LinkTimeout, ProcessLink, ReplayLink
from .settings import Settings, SettingsError
from .watchdog import HangWatchdog


class BadInputError(Exception):
    """The campaign cannot run as declared; the message is one line (exit code 2)."""


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def merge_user_notes(record: Record, saved: tuple[int, int, int] | None) -> None:
    """Keep what `pilot-tui note` / `conclude` wrote into a live session's record file.

    They write the file in place; the session's next save would erase them. One stat per save
    tells whether the file is still the one this session wrote; if not, its notes and its
    conclusion are merged in before the save (never lost).
    """
    if saved is None or _file_identity(record.path) in (saved, None):
        return
    try:
        on_disk = tomllib.loads(record.path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    mine = record.data.setdefault("notes", [])
    mine.extend(n for n in on_disk.get("notes", []) if n not in mine)
    if "conclusion" in on_disk and on_disk["conclusion"] != record.data.get("conclusion"):
        record.data["conclusion"] = on_disk["conclusion"]


def records_error(exc: OSError, path: Path) -> str:
    """One line for a record that could not be written, saying why in words (R24)."""
    why = {
        errno.ENOSPC: "disk full (no space left on the device)",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied (the folder is not writable)",
        errno.EPERM: "permission denied (the folder is not writable)",
        errno.ENAMETOOLONG: "file name too long",
        errno.ENOTDIR: "a path component is a file, not a folder",
        errno.EEXIST: "a file is in the way of the records folder",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return f"{path}: cannot write the record: {why}; every phase saved before is kept"


def check_records_dir(folder: Path) -> None:
    """Refuse a records folder that is a file or cannot be written, before anything runs."""
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"{folder}: --records must be a folder, and this is a file")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise BadInputError(f"{existing}: the records folder cannot be written (read-only or no permission)")
    if existing is not None and not existing.is_dir():
        raise BadInputError(f"{existing}: is a file, so the records folder {folder} cannot be made")


class Session:
    """One campaign run: a runner behind a link, plus the record it fills."""

    def __init__(
        self,
        spec_path: str | Path,
        records_dir: str | Path | None = None,
        *,
        link: Link | None = None,
        record_id: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        # Read now, not at import: the environment of the process that starts the session.
        try:
            self.settings = settings if settings is not None else Settings.from_env()
        except SettingsError as exc:
            raise BadInputError(str(exc)) from None
        self.loaded: LoadedSpec = load_spec(spec_path)  # SpecError: bad input, nothing written
        self.spec = self.loaded.spec
        self.steps: list[Step] = campaign_steps(self.spec)
        self.records_dir = Path(records_dir) if records_dir else default_records_dir(self.loaded.path)
        check_records_dir(self.records_dir)  # before a runner starts: nothing written on refusal
        self.record_id = record_id or new_record_id()
        self.work_dir = self.records_dir / f"{self.spec.campaign.name}-{self.record_id}"
        self.link: Link = link if link is not None else ProcessLink()
        self.record: Record | None = None
        self.ready: RunnerReady | None = None
        self._killed_for_cancel = False
        self._cancel_timer: threading.Timer | None = None
        # The key of the step in flight, and whether its phase has started in the current runner:
        # a cancel (and its kill timer) belongs to that step only, and the timer runs only once
        # the phase has started — never while a runner is still being (re)started for it.
        self._running: str | None = None
        self._phase_started = False
        # The step a cancel was asked for: a runner drops a cancel that arrives before the phase
        # starts (each phase clears the flag), so it is sent again when the phase starts.
        self._cancel_asked: str | None = None
        # Kills the runner when a phase overruns its declared time_s and ignores the deadline.
        self.hang_watchdog = HangWatchdog(self.link.kill, self.settings.hung_grace_s)
        # Told how long the runner has been opening the campaign (building the task, which can
        # take minutes): a view shows it, so the wait never looks like a hang.
        self.on_open_wait: Callable[[float], None] | None = None
        # What the runner said it is doing while it opens the campaign (events.Opening).
        self.opening_stage = ""
        # For the row of a runner that died: the kernel's OOM kills before it, its last memory.
        self._oom_kills_at_start: int | None = None
        self._last_rss_mb: float | None = None
        # The record file as this session last wrote it: a change means someone else wrote it.
        self._saved_stat: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ runner lifecycle

    @property
    def runner_pid(self) -> int | None:
        return self.link.pid

    def _open_runner(self) -> RunnerReady:
        """Start a runner and open the campaign in it, within `settings.open_timeout_s`; BadInputError when
        it refuses, fails, dies or says nothing — never a wait without end."""
        self._oom_kills_at_start = oom_kills()
        self.link.start()
        self.link.send(self._open_command())
        ready = None
        for msg in self._until_idle(self.settings.open_timeout_s, "opening the campaign", self.on_open_wait):
            if isinstance(msg, BadInput):
                self._fail_open(msg.message)
            if isinstance(msg, RunnerError):
                self._fail_open(
                    f"{self.loaded.path}: the task could not be opened: {first_line(msg.message)}"
                )
            if isinstance(msg, Opening):
                self.opening_stage = msg.stage
            if isinstance(msg, RunnerReady):
                ready = msg
        self.opening_stage = ""
        if ready is None:
            self._fail_open(f"{self.loaded.path}: the runner went idle without opening the campaign")
        return ready

    def _open_command(self) -> OpenCampaign:
        """Open the campaign; a new runner taking over gets the rows recorded so far (a restart,
        `continue`): later phases read earlier ones (e.g. `final` finds the export's files)."""
        rows = list(self.record.phases) if self.record is not None else []
        return OpenCampaign(spec_path=str(self.loaded.path), work_dir=str(self.work_dir), rows=rows)

    def _save(self) -> None:
        """Save the record; a folder that cannot take it is one line (disk full, read-only…)."""
        assert self.record is not None
        try:
            merge_user_notes(self.record, self._saved_stat)
            self.record.save()
            self._saved_stat = _file_identity(self.record.path)
        except FileExistsError:
            raise BadInputError(
                f"{self.record.path}: a record with this id exists already; not overwritten"
            ) from None
        except OSError as exc:
            raise BadInputError(records_error(exc, self.record.path)) from None

    def _fail_open(self, message: str) -> None:
        self.close()
        raise BadInputError(message)

    def _until_idle(
        self, deadline_s: float, doing: str, on_wait: Callable[[float], None] | None = None
    ) -> Iterator[WireMessage]:
        """Every event up to the runner's next Idle, each read bounded; the whole within `deadline_s`.
        `on_wait(seconds)` is told how long it has waited at every poll (a view's heartbeat)."""
        waited, poll_s = 0.0, self.settings.poll_s
        began = time.monotonic()
        while True:
            if on_wait is not None:
                on_wait(time.monotonic() - began)
            try:
                msg = self.link.receive(poll_s)
            except LinkTimeout:
                waited += poll_s
                if waited >= deadline_s:
                    self.link.kill()
                    self._fail_open(
                        f"{self.loaded.path}: the runner said nothing for {deadline_s:g} s while {doing}"
                    )
                continue
            if msg is None:
                tail = "; ".join(self.link.stderr_tail()[-3:]) or "no error output"
                how = self.link.exit_status() or "it exited"
                self._fail_open(f"{self.loaded.path}: the runner died ({how}) while {doing}: {tail}")
            if isinstance(msg, Idle):
                return
            yield msg

    def start(self) -> RunnerReady:
        """Start the runner and open the campaign; the record file appears only on success."""
        sweep_stale_temp_files(self.records_dir)
        ready = self._open_runner()
        self.ready = ready
        if self.record is None:
            self.record = Record.create(
                self.records_dir,
                record_id=self.record_id,
                name=self.spec.campaign.name,
                spec_path=self.loaded.path,
                spec_text=self.loaded.text,
                spec_sha256=self.loaded.sha256,
                spec_raw=self.loaded.raw,
                environment=ready.environment,
                accounting=ready.dataset.pop("accounting"),
                dataset=ready.dataset,
            )
            if self.spec.task.file:
                # The user's task code is part of what ran: keep its provenance beside the spec's.
                task_file = self.loaded.resolve(self.spec.task.file)
                self.record.data["campaign"]["task_file"] = {
                    "path": str(task_file),
                    "sha256": sha256_file(task_file),
                }
            # Not saved yet: the file appears when the first step runs (`_begin_step`), so opening
            # a campaign and quitting leaves no empty record behind.
        return ready

    def close(self, timeout: float = 5.0) -> None:
        """Ask the runner to exit, then make sure it did: no orphan process is left."""
        self.hang_watchdog.disarm()
        if self._cancel_timer:
            self._cancel_timer.cancel()
        self.link.close(timeout)

    # ------------------------------------------------------------------ commands

    def step(self, key: str) -> Step:
        return find_step(self.steps, key)

    def run_step(self, key: str, overrides: dict[str, Any] | None = None) -> Iterator[WireMessage]:
        """Run one step; yield every event until the runner is idle again.

        The row is appended and the record saved *before* the PhaseFinished event is yielded, so
        whatever a view shows as finished is already on disk. Every step ends with a row: one the
        runner sent, or one written here when the runner died, hung or went idle without one.
        """
        if self.record is None:
            raise RuntimeError("start() the session first")
        if self._cancel_asked not in (None, key):
            self._cancel_asked = None  # a late cancel of the previous step must not stop this one
        if self._cancel_timer:
            self._cancel_timer.cancel()
        self._killed_for_cancel = False
        self._running, self._phase_started = key, False
        if not self.link.alive():
            self._open_runner()
        overrides, pending_run = self._lr_run_attempt(key, dict(overrides or {}))
        if self._saved_stat is None:
            self._begin_step(key)  # the first save creates the file: refused before anything runs
            self.link.send(RunStep(step=key, overrides=overrides))
        else:
            # The runner starts while the record names the step in flight: the save (a few ms,
            # the whole record each time) is no longer a pause between two steps. Nothing read
            # from the runner is handled before it.
            self.link.send(RunStep(step=key, overrides=overrides))
            self._begin_step(key)
        started: PhaseStarted | None = None
        finished = resent = hung = False
        silent, poll_s = 0.0, self.settings.poll_s
        try:
            while True:
                try:
                    msg = self.link.receive(poll_s)
                    silent = 0.0
                except LinkTimeout:
                    silent += poll_s
                    if silent >= self.settings.silence_s and not hung:
                        # A runner that sends nothing, not even its counters, is hung: ended,
                        # its last lines are still read, then the step gets its row below.
                        hung = True
                        self.link.kill()
                    continue
                if msg is None and started is None and not resent and not hung:
                    # The runner was already dying when the step was sent (killed while idle: a
                    # multi-threaded process can take a moment to be reaped): the step never
                    # began, so it runs in a new runner instead of being recorded as a crash.
                    resent = True
                    self._phase_started = False
                    self._open_runner()
                    self.link.send(RunStep(step=key, overrides=overrides))
                    continue
                if msg is None:
                    reason = self._death_reason(key, hung)
                    if pending_run:
                        # Yielded too, so a view drops the run's live "running" state for the row.
                        yield self._lost_run(pending_run, str(overrides.get("retry_of", "")), reason)
                    yield self._end_without_row(key, started, reason, cancelled=self._killed_for_cancel)
                    return
                if isinstance(msg, RecordUpdate) and msg.section == "runs":
                    pending_run = ""
                if isinstance(msg, Counters):
                    self._last_rss_mb = msg.values.get("rss_mb") or self._last_rss_mb
                if isinstance(msg, PhaseStarted):
                    started, self._phase_started = msg, True
                    if self._cancel_asked == key:
                        self.link.send(Cancel())
                        self._arm_kill_timer(key)
                    self.hang_watchdog.arm(key, self.spec.limit_for(msg.phase).time_s)
                elif isinstance(msg, PhaseFinished):
                    self.hang_watchdog.disarm()
                    finished = True
                    self.record.data["campaign"].pop("in_flight", None)
                    self.record.append("phases", msg.row)
                    self._save()
                elif isinstance(msg, RecordUpdate):
                    msg = self.apply_update(msg)
                if isinstance(msg, Idle):
                    if started is not None and not finished:
                        # e.g. a failure outside the phase's own guard: the step still gets its row.
                        yield self._end_without_row(key, started, "the runner went idle without a row")
                    return
                yield msg
        finally:
            self._running, self._phase_started, self._cancel_asked = None, False, None
            self.hang_watchdog.disarm()
            if self._cancel_timer:
                self._cancel_timer.cancel()

    def _death_reason(self, key: str, hung: bool) -> str:
        phase = self.step(key).phase
        if self.hang_watchdog.fired:
            return f"{self.hang_watchdog.fired} (in {phase})"
        if self._killed_for_cancel:
            return (
                f"cancelled; the runner did not stop within {self.settings.cancel_grace_s:g} s and was killed"
            )
        if hung:
            return f"the runner sent nothing for {self.settings.silence_s:g} s during {phase} (hung) and was killed"
        return death_reason(self.link.exit_status(), phase, self._oom_kills_at_start, self._last_rss_mb)

    def _begin_step(self, key: str) -> None:
        """Write the record before a step runs, naming the step in flight.

        The first step creates the file (a campaign opened and closed writes nothing); a record
        left with `in_flight` set was interrupted during that step, and says so when re-opened.
        The next saved row clears it.
        """
        assert self.record is not None
        self.record.data["campaign"]["in_flight"] = key
        self._save()

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
        self._save()
        return msg if value is msg.value else RecordUpdate(section=msg.section, value=value)

    # ------------------------------------------------------------------ LR board (R13, R14)

    def _lr_run_attempt(self, key: str, overrides: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Overrides for an LR run with its attempt number, and the id it will get ("" otherwise).

        Only the session sees the record, so it numbers attempts; a value the caller gave is kept
        (a conflicting LR or seed is refused by the runner with the reason).
        """
        step = self.step(key)
        if step.phase != "lr_run" or self.record is None:
            return overrides, ""
        numbered = board.attempt(self.record.data.get("runs", []), step.variant)
        out = dict(overrides, attempt=numbered["attempt"], retry_of=numbered["retry_of"])
        for name in ("lr", "seed"):
            if name in numbered:
                out.setdefault(name, numbered[name])
        return out, f"{step.variant}-{numbered['attempt']}"

    def _lost_run(self, run_id: str, retry_of: str, reason: str) -> RecordUpdate:
        """The runner died inside an LR run: the run still gets its row, status failed (R14)."""
        row = board.lost_run(
            run_id, retry_of, reason, cancelled=self._killed_for_cancel, spec_sha256=self.loaded.sha256
        )
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

    def _end_without_row(
        self, key: str, started: PhaseStarted | None, reason: str, *, cancelled: bool = False
    ) -> PhaseFinished:
        """The fail row of a step the runner could not finish itself; the runner is closed so the
        next step starts a fresh one."""
        tail = self.link.stderr_tail()[-10:]
        self.close()
        step = self.step(key)
        row = phase_row(
            name=step.phase,
            step=key,
            variant=step.variant,
            verdict=FAIL,
            reason=reason,
            params=started.params if started else {},
            memory={},
            details={"runner_stderr": tail},
            cancelled=cancelled,
        )
        assert self.record is not None
        self.record.data["campaign"].pop("in_flight", None)
        self.record.append("phases", row)
        self._save()
        return PhaseFinished(step=key, row=row)

    def cancel(self, key: str | None = None) -> None:
        """Ask the step `key` (default: the one running) to stop at its next safe point; kill the
        runner if its phase does not stop within the grace period.

        A cancel that comes before the phase started (the runner is still being started for it)
        is remembered and sent again when it starts: that runner would drop it.
        """
        key = key or self._running
        if key is None:
            return  # nothing in flight
        self._cancel_asked = key
        self.link.send(Cancel())
        if self._running == key and self._phase_started:
            self._arm_kill_timer(key)

    def _arm_kill_timer(self, key: str) -> None:
        def force() -> None:
            # Only if that same step's phase is still running: it may have ended in the grace period.
            if self._running == key and self._phase_started and self.link.alive():
                self._killed_for_cancel = True
                self.link.kill()

        if self._cancel_timer:
            self._cancel_timer.cancel()
        self._cancel_timer = threading.Timer(self.settings.cancel_grace_s, force)
        self._cancel_timer.daemon = True
        self._cancel_timer.start()

    def steps_to_run(self) -> list[Step]:
        """The steps without a row yet (all of them in a new campaign; fewer after `continue`).

        A row that says the step was cancelled (a cancel, SIGTERM, a hang-up) does not count:
        that step was interrupted, not done.
        """
        last: dict[str, PhaseRow] = {}
        for row in read_rows(self.record.phases if self.record is not None else []):
            last[row.recorded_key] = row
        return [s for s in self.steps if s.key not in last or last[s.key].cancelled]

    def finish(self) -> dict[str, Any]:
        """Compute the choice sheet and package plan from the record's rows and keep them as `[plan]`.

        Called at the end of a campaign (R18, R19). A plan that cannot be computed is kept as
        `[plan] error = "..."` rather than lost: every row is already on disk either way.
        """
        if self.record is None:
            raise RuntimeError("start() the session first")
        try:
            plan = compute_plan(self.record.data, record_dir=self.record.path.parent).as_toml()
        except Exception as exc:  # the rows are on disk; a planning bug must not hide them
            plan = {"error": f"{type(exc).__name__}: {exc}"}
        self.record.set_section("plan", plan)
        self._save()
        return plan


def continue_session(record_path: str | Path, *, link: Link | None = None) -> Session:
    """A session that runs the steps a record does not hold yet, into that same record (R24).

    For a campaign whose view died (a dropped SSH connection): refused, naming the file, when
    the campaign file or the task file changed since the record was made (their sha256 are in it).
    """
    record = Record.read(record_path)  # RecordError: bad input
    campaign = record.data.get("campaign") or {}
    spec_path = Path(str(campaign.get("spec_path", "")))
    session = Session(spec_path, record.path.parent, link=link, record_id=str(campaign.get("id", "")) or None)
    if session.loaded.sha256 != campaign.get("spec_sha256"):
        raise BadInputError(
            f"{spec_path}: the campaign file changed since record {record.path.name} was made; "
            "run it as a new campaign"
        )
    if session.spec.task.file:
        task = session.loaded.resolve(session.spec.task.file)
        hashed = (campaign.get("task_file") or {}).get("sha256")
        if not hashed or sha256_file(task) != hashed:
            raise BadInputError(
                f"{task}: the task file changed since record {record.path.name} was made "
                "(or the record holds no hash of it); run it as a new campaign"
            )
    session.work_dir = record.path.parent / record.path.stem
    record.read_only = False
    session.record = record
    session._saved_stat = _file_identity(record.path)
    return session


def replay_session(
    spec_path: str | Path, recording: str | Path, records_dir: str | Path | None = None, delay_s: float = 0.0
) -> Session:
    """A session over a recorded event stream: the same code as a live run, no process, no torch."""
    link = ReplayLink(recording, delay_s)
    return Session(spec_path, records_dir, link=link, record_id=link.record_id or None)
