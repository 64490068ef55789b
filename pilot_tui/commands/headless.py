"""The headless view: run every step in order, one line per phase, a progress bar on long ones."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from ..analysis.plan import Plan, summary_lines
from ..core import phase_table
from ..core.events import PhaseFinished, PhaseProgress, PhaseStarted, RunnerError, WireMessage
from ..core.key_figures import shown_reason
from ..core.rows import PhaseRow
from ..core.text import one_line
from ..session.driver import Session

MARKS = {"pass": "✓", "warn": "!", "fail": "✗"}


def fit(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in "…" when cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def phase_line(data: dict, width: int | None = 80) -> str:
    """One line per phase: mark, verdict, step, duration, peak memory (allocated and reserved side
    by side, never summed, R6) and the reason, cut with "…" to `width` (None: whole)."""
    row = PhaseRow.from_toml(data)
    if row is None:
        return fit(f"✗ fail unreadable row {one_line(str(data), 60)}", width or 200)
    # Record and task text is data: escaped and bounded, never sent raw to the terminal (R24).
    label = fit(one_line(row.key, 200), 20)
    took = f"{row.duration_s:7.2f} s" if row.duration_s is not None else "      — "
    head = (
        f"{MARKS.get(row.verdict, '?')} {one_line(row.verdict, 20):<4} {label:<20} {took} "
        f"{row.memory.compact():<17} "
    )
    # A pass row says what it measured (steady's ms per update, save's MiB and seconds…).
    line = head + one_line(shown_reason(row), 1000)
    return line if width is None else fit(line, width)


def line_width(out: TextIO) -> int | None:
    """The terminal's width on a terminal; None (whole lines) in a log file."""
    if not out.isatty():
        return None
    return shutil.get_terminal_size((80, 24)).columns


def rank_lines(data: dict) -> list[str]:
    """A phase run on several ranks (R22): one indented line per rank under the phase's line."""
    out = []
    for r in data.get("ranks") or []:
        node = f"node {r['node']} " if "node" in r else ""
        parts = [f"{node}rank {r.get('rank', '?')}: {r.get('verdict', '?')}"]
        for key, label in (("peak_reserved_mb", "peak reserved"), ("peak_rss_mb", "peak RSS")):
            if isinstance(r.get(key), int | float):
                parts.append(f"{label} {r[key]:.1f} MiB")
                break
        if isinstance(r.get("step_time_s"), int | float):
            parts.append(f"step {r['step_time_s'] * 1e3:.1f} ms")
        if isinstance(r.get("save_s"), int | float):
            # A trainer's checkpoint says no per-rank bytes (rank 0 writes the model): none shown.
            written = (
                f", {r['written_mb']:.1f} MiB written" if isinstance(r.get("written_mb"), int | float) else ""
            )
            parts.append(f"save {r['save_s']:.3f} s{written}")
        if r.get("reason"):
            parts.append(str(r["reason"]))
        out.append("      " + " · ".join(parts))
    return out


class ProgressBar:
    """A one-line bar redrawn in place, only on a terminal (logs stay clean).

    Redrawn every second between events too, with the elapsed time, so a long phase that sends
    few progress events (resume in a new process) still shows that it is alive.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.visible = False
        self._last: PhaseProgress | None = None
        self._since = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if self.enabled:
            threading.Thread(target=self._tick, daemon=True, name="progress-bar").start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._last is not None:
                    self._draw(self._last)

    def show(self, ev: PhaseProgress) -> None:
        if not self.enabled or ev.total <= 0:
            return
        with self._lock:
            if self._last is None or self._last.step != ev.step:
                self._since = time.monotonic()
            self._last = ev
            self._draw(ev)

    def _draw(self, ev: PhaseProgress) -> None:
        width = 20
        filled = int(width * ev.done / ev.total)
        loss = f" loss {ev.loss:.4f}" if ev.loss is not None else ""
        message = f" {ev.message}" if ev.message else ""
        elapsed = f" {time.monotonic() - self._since:.0f} s"
        text = f"  {ev.step} [{'#' * filled}{'.' * (width - filled)}] {ev.done}/{ev.total}{loss}{elapsed}{message}"
        cols = shutil.get_terminal_size((80, 24)).columns
        self.stream.write("\r" + fit(text, cols - 1) + "\033[K")
        self.stream.flush()
        self.visible = True

    def status(self, text: str) -> None:
        """A line of text in the bar's place (the phase running, before any progress)."""
        self._last = None  # the ticker redraws progress, not this line
        if self.enabled:
            self.stream.write(f"\r\033[K  {text}")
            self.stream.flush()
            self.visible = True

    def clear(self) -> None:
        with self._lock:
            self._last = None
            if self.visible:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.visible = False

    def close(self) -> None:
        self._stop.set()
        self.clear()


class Heartbeat:
    """The phase in progress, and a line every `period` seconds while it stays silent (a slow
    `build_model`, a long save): a quiet terminal looks like a hang. Ticks on any runner event,
    including the live counters the runner sends twice a second while a phase runs."""

    def __init__(self, out: TextIO, bar: ProgressBar, period: float) -> None:
        self.out, self.bar, self.period = out, bar, period
        self.step = ""
        self.started = self.last = 0.0

    def see(self, ev: WireMessage) -> None:
        now = time.monotonic()
        if isinstance(ev, PhaseStarted):
            self.step, self.started, self.last = ev.step, now, now
            if self.bar.enabled:
                self.bar.status(f"{ev.step} …")
        elif isinstance(ev, PhaseFinished):
            self.step = ""
        elif isinstance(ev, PhaseProgress):
            self.last = now
        elif self.step and now - self.last >= self.period:
            self.last = now
            line = f"{self.step} still running ({now - self.started:.0f} s)"
            if self.bar.enabled:
                self.bar.status(line)
            else:
                print(f"  … {line}", file=self.out, flush=True)


# While a campaign opens (the runner builds the task): the line's period on a terminal.
OPENING_TTY_S = 2.0


class OpeningBeat:
    """The elapsed time while the runner opens the campaign: on a terminal a status line redrawn
    every 2 s, otherwise a line every `period` seconds. Reading and tokenising a large dataset
    or a script's `dataset.map` takes minutes before the first phase."""

    def __init__(
        self, out: TextIO, bar: ProgressBar, period: float, stage: Callable[[], str] = lambda: ""
    ) -> None:
        self.out, self.bar = out, bar
        self.period = min(period, OPENING_TTY_S) if bar.enabled else period
        self.last = 0.0
        self.stage = stage  # what the runner said it is doing (session.opening_stage)
        self.said = ""

    def see(self, waited: float) -> None:
        stage = self.stage()
        # On a terminal a new stage is drawn at once; a log gets a line per period.
        moved = self.bar.enabled and stage != self.said and waited >= OPENING_TTY_S
        if waited - self.last < self.period and not moved:
            return
        self.last, self.said = waited, stage
        line = f"opening the campaign: {stage or 'the runner builds the task'} ({waited:.0f} s)"
        if self.bar.enabled:
            self.bar.status(line)
        else:
            print(f"  … {line}", file=self.out, flush=True)

    def done(self) -> None:
        self.bar.close()


def run_headless(
    session: Session,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    keep_going: bool = False,
    heartbeat_s: float = 15.0,
) -> int:
    """Exit 0 when every gate passes (warnings included), 1 when one fails.

    A failed `stack` stops the campaign unless `keep_going`: figures measured on a software stack
    that cannot run the task would only be spent time (R18: fail fast).
    """
    with stop_on_signals(session) as stopped:
        return _run(session, out, err, keep_going, stopped, heartbeat_s)


@contextlib.contextmanager
def stop_on_signals(session: Session) -> Iterator[list[int]]:
    """SIGTERM, SIGHUP and SIGINT act as a cancel: the step in flight ends with its row, the
    record is saved and the campaign stops; a second signal leaves at once (KeyboardInterrupt).

    A hang-up means the terminal is gone (a dropped SSH connection): output goes to /dev/null
    from then on, so a write to the dead terminal cannot cost the row.
    """
    stopped: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if stopped:
            raise KeyboardInterrupt
        stopped.append(signum)
        if signum == signal.SIGHUP:
            devnull = os.open(os.devnull, os.O_WRONLY)
            for fd in (1, 2):
                os.dup2(devnull, fd)
            os.close(devnull)
        session.cancel()

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with contextlib.suppress(ValueError):  # not the main thread: leave the defaults
            previous[sig] = signal.signal(sig, handler)
    try:
        yield stopped
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _run(
    session: Session, out: TextIO, err: TextIO, keep_going: bool, stopped: list[int], heartbeat_s: float
) -> int:
    opening = OpeningBeat(out, ProgressBar(err), heartbeat_s, lambda: session.opening_stage)
    session.on_open_wait = opening.see
    try:
        ready = session.start()
    finally:
        opening.done()
    assert session.record is not None
    acc = session.record.data["accounting"]
    print(f"pilot-tui · campaign {session.spec.campaign.name} · record {session.record.path}", file=out)
    print(
        one_line(
            f"  device {ready.environment['device']} · torch {ready.environment['torch']} · "
            f"splits {ready.dataset['splits']}"
        ),
        file=out,
    )
    open_s = ready.environment.get("open_s")
    if isinstance(open_s, dict) and open_s:
        # Where the wait before the first verdict went, stage by stage, as the runner timed it.
        stages = " · ".join(f"{stage} {float(s):.1f} s" for stage, s in open_s.items())
        print(one_line(f"  opened in {sum(map(float, open_s.values())):.1f} s: {stages}"), file=out)
    print(
        f"  effective batch {acc['microbatch']} × {acc['accumulation']} × {acc['replicas']} = "
        f"{acc['effective_batch']} · {acc['note']}",
        file=out,
        flush=True,
    )
    bar = ProgressBar(err)
    beat = Heartbeat(out, bar, heartbeat_s)
    width = line_width(out)
    to_run = session.steps_to_run()
    failed = _earlier_failures(session, to_run, out)
    try:
        for step in to_run:
            if stopped:
                break
            stop = False
            rows = 0
            for ev in session.run_step(step.key):
                beat.see(ev)
                failed += _show(ev, bar, out, err, width)
                if isinstance(ev, PhaseFinished):
                    rows += 1
                    row = PhaseRow.from_toml(ev.row)
                    stop = row is not None and phase_table.stops_campaign(row.name, row.verdict)
            failed += no_row(step.key, rows, out)
            if stop and not keep_going:
                print(f"{step.phase} failed: later phases not run (--keep-going runs them anyway)", file=out)
                break
    finally:
        bar.close()
        session.close()
    plan = session.finish()
    for line in plan_summary(plan):
        print(one_line(line), file=out)
    if stopped:
        name = signal.Signals(stopped[0]).name
        print(
            f"stopped by {name}: the step in flight was cancelled; the record holds every phase so far · "
            f"record {session.record.path}",
            file=out,
            flush=True,
        )
        return 128 + stopped[0]
    verdict = "FAIL" if failed else "PASS"
    print(f"{verdict}: {failed} failed gate(s) · record {session.record.path}", file=out, flush=True)
    return 1 if failed else 0


def no_row(key: str, rows: int, out: TextIO) -> int:
    """A step that ended without a row is a failed gate, never a silent pass (1 if so, else 0)."""
    if rows:
        return 0
    # Not a phase line (no verdict mark): the record holds no row for it, and readers of the
    # output match phase lines against the record's rows.
    print(
        f"  {key}: ended without a row, counted as a failed gate (see the runner error)", file=out, flush=True
    )
    return 1


def _earlier_failures(session: Session, to_run: list, out: TextIO) -> int:
    """`continue`: the failed gates already in the record count toward the exit code (those of
    steps about to run again excepted), and the line says how much is left."""
    assert session.record is not None
    if len(to_run) == len(session.steps) and not session.record.phases:
        return 0  # a new campaign
    again = {s.key for s in to_run}
    print(f"  continuing: {len(to_run)} of {len(session.steps)} steps left", file=out, flush=True)
    return sum(1 for r in session.record.phases if r.get("verdict") == "fail" and r.get("step") not in again)


def plan_summary(saved: dict) -> list[str]:
    """The plan's few summary lines (the record's `[plan]` holds the whole sheet and package)."""
    if "error" in saved:
        return [f"plan: could not be computed: {saved['error']}"]
    plan = Plan.from_toml(saved)
    # The caveats first: a plan measured on the CPU or on a busy machine must say so here too.
    return [f"plan: ! {c}" for c in plan.caveats] + summary_lines(plan)


def _show(ev: WireMessage, bar: ProgressBar, out: TextIO, err: TextIO, width: int | None = None) -> int:
    if isinstance(ev, PhaseProgress):
        bar.show(ev)
    elif isinstance(ev, PhaseFinished):
        bar.clear()
        # Printed only after the record holding this row is on disk.
        print(phase_line(ev.row, width), *rank_lines(ev.row), sep="\n", file=out, flush=True)
        return int(ev.row["verdict"] == "fail")
    elif isinstance(ev, RunnerError):
        bar.clear()
        print(f"runner error: {one_line(ev.message, 1000)}", file=err, flush=True)
    return 0
