"""The pilot-tui dashboard: step through a campaign with the keyboard, watch every gate.

Data flows one way: the runner worker (a thread owning the Session) and the NVML worker post
Textual messages; `@on` handlers here update plain state on the UI thread and mark panes dirty;
a 10 Hz timer redraws the visible dirty pane. No widget is touched from a thread, and the UI
process never imports torch.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Header, Static, TabbedContent, TabPane

from .. import DEMO_CAMPAIGN
from ..analysis import board
from ..analysis.plan import provisional_plan, spec_of
from ..core import dimensions, notes, phase_table
from ..core.record import LIST_SECTIONS, Record, RecordError
from ..core.rows import RunRow, StepKey, read_rows, read_runs
from ..core.steps import campaign_steps
from ..core.text import clean, clean_tree, literal, one_line
from ..session.driver import Session
from .commands import PilotCommands
from .cpu import CpuProbe, CpuSample
from .focus import QuietFocusScreen
from .footer import QuietFooter
from .messages import (
    CampaignStopped,
    CountersMsg,
    CpuSampled,
    NoteWritten,
    NvmlSampled,
    PhaseFinishedMsg,
    PhaseProgressMsg,
    PhaseStartedMsg,
    RecordSaved,
    RecordUpdateMsg,
    RunnerErrorMsg,
    RunnerIdle,
    RunUpdateMsg,
    SessionFailed,
    SessionReady,
)
from .nvml import NvmlProbe, NvmlSnapshot
from .panes.batch import BatchPane
from .panes.board import BoardPane
from .panes.counters import CountersPane
from .panes.gates import GatesPane
from .panes.plan import PlanPane
from .ranks import latest_ranks
from .runner_thread import RunnerThread, Source
from .screens import ConfirmScreen, HelpScreen, TextPrompt, VariantForm
from .state import QUEUED, RUNNING, WAITING, GateState, gate_from_row, next_variant_id, read_row

PANES = ("gates", "batch", "counters", "board", "plan")
REDRAW_S = 0.1  # a step starting or ending is drawn within 0.1 s
STARTING = "starting the runner…"
# While the runner opens the campaign and has not said what it does (session.opening_stage).
OPENING = "the runner builds the task"
LIVE_S = 0.5  # live figures (progress, counters, curves) redraw at most twice a second
LIVE_PANES = ("counters", "board")  # panes of live figures: redrawn by the timer, not by a switch
NVML_PERIOD_S = 0.5
CPU_PERIOD_S = 1.0
HISTORY = 60  # sparkline samples (~30 s at 2 Hz)
# Past the session's cancel grace (the runner is killed then): the join waits that long and this more.
JOIN_MARGIN_S = 5.0
RUN_ACTIONS = ("next_step", "run_all", "variant", "cancel_phase", "rerun")


def freeze_heap() -> None:
    """Collect, then move every object alive now out of the collector's reach (`gc.freeze`).

    The dashboard's heap (spec, record, session, Textual's widgets) is built once and lives as
    long as the app; each full collection walked all of it, a 100–150 ms pause that landed in
    whatever key was waiting (the slowest pane switches while a run trained). Frozen, a full
    collection walks only what was made since. `gc.unfreeze()` when the app closes hands it back
    (a test process runs many apps).
    """
    gc.collect()
    gc.freeze()


def read_if_record(path: Path) -> Record | None:
    """The saved record at `path`, or None when it is not one (a campaign spec: the spec loader
    then names any problem)."""
    try:
        record = Record.read(path)
    except RecordError:
        return None
    campaign = record.data.get("campaign")
    return record if isinstance(campaign, dict) and "id" in campaign else None


class PilotApp(App[int]):
    """The dashboard over one campaign (live) or one saved record (read-only)."""

    CSS_PATH = "app.tcss"
    TITLE = "pilot-tui"
    COMMANDS = App.COMMANDS | {PilotCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n,space", "next_step", "next"),
        Binding("a", "run_all", "all"),
        Binding("v", "variant", "variant"),
        Binding("c", "cancel_phase", "cancel"),
        Binding("e", "save_record", "save record"),
        Binding("o", "note", "note", show=False),
        Binding("C", "conclude", "conclude", show=False),
        Binding("1", "show_pane('gates')", "gates", show=False),
        Binding("2", "show_pane('batch')", "batch", show=False),
        Binding("3", "show_pane('counters')", "counters", show=False),
        Binding("4", "show_pane('board')", "board", show=False),
        Binding("5", "show_pane('plan')", "plan", show=False),
        Binding("r", "rerun", "re-run", show=False),
        Binding("d", "toggle_detail", "details", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "request_quit", "quit"),
        # Textual's own ctrl+q quits at once; here it asks like q while a phase runs.
        Binding("ctrl+q", "request_quit", "quit", show=False, priority=True),
    ]
    HELP_KEYS: ClassVar[list[tuple[str, str]]] = [
        ("n, space", "run the next waiting step"),
        ("a", "run every remaining step, in order"),
        ("v", "re-run the selected phase as a new variant (microbatch, max length, …)"),
        ("c", "cancel the running phase (and the queued ones); n runs it again"),
        ("r", "re-run the selected step under its own key (a new row)"),
        ("d", "details: the selected step's (Gates), the whole plan (Plan)"),
        ("e", "save record: write the record, show its path"),
        ("o", "add an observation on the selected row"),
        ("C", "write the campaign's conclusion and decision"),
        ("1 … 5", "Gates · Batch · Counters · Board · Plan"),
        ("tab / shift+tab", "move focus; arrows move in tables"),
        ("ctrl+p", "command palette: the same actions by name"),
        ("?", "this help"),
        ("q, ctrl+q", "quit (asks first while a phase runs; the runner is stopped cleanly)"),
    ]

    def __init__(
        self,
        target: str | Path | None = None,
        records_dir: str | Path | None = None,
        autorun: bool = False,
        *,
        source: Source | None = None,
        nvml: NvmlProbe | None = None,
    ) -> None:
        super().__init__()
        self.autorun = autorun
        self.source: Source | None = None
        self.saved: Record | None = None
        if source is not None:
            self.source = source
        else:
            path = Path(target) if target else DEMO_CAMPAIGN
            # Parsed once: a large record takes a while to parse (tomllib), twice would double it.
            saved = read_if_record(path) if path.suffix == ".toml" and path.is_file() else None
            if saved is not None:
                self.saved = saved
            else:
                self.source = Session(path, records_dir)  # SpecError: bad input, exit 2
        self.read_only = self.saved is not None
        self.nvml = nvml if nvml is not None else NvmlProbe()
        self.runner: RunnerThread | None = (
            RunnerThread(self.source, self.post_message) if self.source else None
        )
        self.record_path: Path | None = self.saved.path if self.saved else None
        # UI-thread state; the panes draw from it. Gates are replaced, never mutated.
        self.gates: dict[str, GateState] = {}
        self.started: dict[str, float] = {}
        self.sections: dict[str, Any] = {}
        self.live_runs: dict[str, dict[str, Any]] = {}
        self.runner_counters: tuple[str, dict[str, float]] | None = None
        self.nvml_snapshot: NvmlSnapshot | None = None
        self.history: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self.history_label = "nothing sampled yet"
        self.status_text = ""
        self._last_status = ""
        self._last_coarse = ""  # the status line without the running step's count
        self.campaign_keys: set[str] = set()
        self.dirty: set[str] = set(PANES)
        # Panes to draw at the next tick; the others (live figures only) at most every LIVE_S.
        self.urgent: set[str] = set(PANES)
        self.drawn_at: dict[str, float] = {}
        self.banner = ""
        self.cpu_sample: CpuSample | None = None
        self._nvml_stop = threading.Event()
        self._load_initial()

    def get_default_screen(self) -> Screen:
        return QuietFocusScreen(id="_default")  # a pane switch moves focus: see tui/focus.py

    def notify(self, message: str, *, title: str = "", **kwargs: Any) -> None:  # type: ignore[override]
        """Every notification is literal text: reasons and paths come from records and tasks."""
        kwargs["markup"] = False
        super().notify(one_line(message), title=one_line(title), **kwargs)

    # ------------------------------------------------------------------ state

    def _load_initial(self) -> None:
        if self.saved is not None:
            # What is shown, not what is kept: every string inert and bounded (R24).
            data = clean_tree(self.saved.data)
            self.title = f"pilot-tui · {one_line(data['campaign'].get('name', '?'), 120)}"
            self.sub_title = f"record {one_line(data['campaign'].get('id', '?'), 120)} (read-only)"
            for row in data.get("phases", []):
                gate = gate_from_row(row)
                key, n = gate.key, 2
                while key in self.gates:  # a step run twice keeps both rows
                    key, n = f"{gate.key}#{n}", n + 1
                self.gates[key] = gate.with_(key=key)
            self.sections = {k: v for k, v in data.items() if k != "phases"}
            self.status_text = f"read-only record: {one_line(self.saved.path)}"
            # From the record as written (its spec is parsed), the words made inert.
            self.banner = clean(interrupted_banner(self.saved.data))
            return
        assert self.source is not None
        name = getattr(getattr(self.source, "spec", None), "campaign", None)
        self.title = f"pilot-tui · {name.name if name else 'campaign'}"
        self.sub_title = f"record {self.source.record_id}"
        self.campaign_keys = {step.key for step in self.source.steps}
        for step in self.source.steps:
            self.gates[step.key] = GateState(
                key=step.key, label=step.label, phase=step.phase, variant=step.variant
            )
        self._show_continued_record()
        self.status_text = STARTING
        self.started_at = time.monotonic()

    def _show_continued_record(self) -> None:
        """`--continue`: the steps the record already holds show their rows, the rest wait."""
        record = getattr(self.source, "record", None)
        steps_to_run = getattr(self.source, "steps_to_run", None)
        if record is None or steps_to_run is None:
            return
        pending = {s.key for s in steps_to_run()}
        for row in clean_tree(record.phases):
            gate = gate_from_row(row)
            if gate.key in self.gates and gate.key not in pending:
                self.gates[gate.key] = gate.with_(label=self.gates[gate.key].label)
        self.sections = clean_tree({k: v for k, v in record.data.items() if k != "phases"})

    def _set_gate(self, gate: GateState) -> None:
        previous = self.gates.get(gate.key)
        self.gates[gate.key] = gate
        self.dirty.update(("gates",))
        if previous is None or previous.status != gate.status:
            self.urgent.add("gates")  # a step started or ended: drawn at the next tick

    @property
    def selected_gate(self) -> GateState | None:
        key = self.gates_pane.selected_key
        return self.gates.get(key) if key else None

    @property
    def idle(self) -> bool:
        """True when the runner is started and has nothing running or queued."""
        d = self.runner
        return d is not None and d.ready and not d.busy and not d.pending()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        banner = Static(literal(self.banner), id="banner")
        banner.display = bool(self.banner)
        yield banner
        with TabbedContent(initial="gates", id="tabs"):
            with TabPane("1 Gates", id="gates"):
                yield GatesPane()
            with TabPane("2 Batch", id="batch"):
                yield BatchPane()
            with TabPane("3 Counters", id="counters"):
                yield CountersPane()
            with TabPane("4 Board", id="board"):
                yield BoardPane()
            with TabPane("5 Plan", id="plan"):
                yield PlanPane()
        yield Static(literal(self.status_text), id="status")
        yield QuietFooter()

    def on_mount(self) -> None:
        # Kept once: `query_one` on the app searches the *active* screen, which is a modal at times.
        self.tabs = self.query_one(TabbedContent)
        self.status_bar = self.query_one("#status", Static)
        self.gates_pane = self.query_one(GatesPane)
        self.batch_pane = self.query_one(BatchPane)
        self.counters_pane = self.query_one(CountersPane)
        self.board_pane = self.query_one(BoardPane)
        self.plan_pane = self.query_one(PlanPane)
        self.panes: dict[str, Widget] = {
            "gates": self.gates_pane,
            "batch": self.batch_pane,
            "counters": self.counters_pane,
            "board": self.board_pane,
            "plan": self.plan_pane,
        }
        if self.saved is not None and self.sections.get("environment", {}).get("device") == "cpu":
            self.gates_pane.set_cpu()
        self.redraw(force_all=True)
        self.query_one("#gate-table").focus()
        # Once the first frame is out (a collection holds the GIL the terminal writer needs).
        self.set_timer(0.5, freeze_heap)
        self.redraw_timer = self.set_interval(REDRAW_S, self.redraw)
        self._stop_on_signals()
        if self.runner is not None:
            self._thread(
                self.runner.run, "runner", "drives the runner process: starts it, runs steps, closes it"
            )
            self._thread(self._poll_nvml, "nvml", "samples every GPU through NVML about twice a second")
            self._thread(
                self._poll_cpu, "cpu", "samples the runner's CPU %, RSS and the system memory each second"
            )

    def _thread(self, body: Callable[[], None], name: str, description: str) -> None:
        """A named Textual thread worker of its own group, that reports errors instead of exiting."""
        self.run_worker(
            body,
            name=name,
            group=name,
            exclusive=True,
            thread=True,
            exit_on_error=False,
            description=description,
        )

    def _stop_on_signals(self) -> None:
        """SIGTERM and SIGHUP (a dropped SSH connection) act as a cancel then a quit: the step in
        flight gets its row and the record is saved before the app exits (128 + signal)."""
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, self._on_stop_signal, sig)

    def _on_stop_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            # The terminal is gone: drawing to it must not fail the shutdown that saves the row.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        self.stop_workers()  # cancels the running step and waits for its row to be saved
        self.exit(128 + signum)

    def _poll_nvml(self) -> None:
        """Worker thread: cheap NVML queries at ~2 Hz; stops for good when NVML is unavailable."""
        try:
            while not self._nvml_stop.is_set():
                snap = self.nvml.sample()
                self.post_message(NvmlSampled(snap))
                if snap.error:
                    return  # nothing will change: no driver, no GPU
                self._nvml_stop.wait(NVML_PERIOD_S)
        finally:
            self.nvml.close()

    def _poll_cpu(self) -> None:
        """Worker thread: the runner process and system memory through psutil, once a second."""
        probe = CpuProbe()
        while not self._nvml_stop.is_set():
            pid = getattr(self.source, "runner_pid", None)
            self.post_message(CpuSampled(probe.sample(pid)))
            self._nvml_stop.wait(CPU_PERIOD_S)

    def on_unmount(self) -> None:
        self.stop_workers()
        gc.unfreeze()

    def stop_workers(self) -> None:
        """Stop the workers and close the session: the runner process never outlives the app."""
        if hasattr(self, "redraw_timer"):
            self.redraw_timer.stop()
        self._nvml_stop.set()
        runner = self.runner
        if runner is None:
            return
        runner.stop()
        grace_s = self.source.settings.cancel_grace_s if self.source is not None else 0.0
        if not runner.done.wait(grace_s + JOIN_MARGIN_S) and self.source is not None:
            self.source.close(timeout=1.0)  # last resort: kills the runner

    # ------------------------------------------------------------------ redraw (≤ 10×/s)

    def redraw(self, force_all: bool = False) -> None:
        """Draw the dirty panes (only the visible one unless `force_all`)."""
        with contextlib.suppress(NoMatches):  # the app is closing: its widgets are already gone
            self.draw_dirty(force_all)

    def draw_dirty(self, force_all: bool) -> None:
        active = self.tabs.active or "gates"
        running = any(g.status == RUNNING for g in self.gates.values())
        if running:
            self.dirty.add("gates")  # the elapsed time of the running row moves
        now = time.monotonic()
        if force_all:
            todo = set(self.dirty)
        elif active in self.dirty and (
            active in self.urgent or now - self.drawn_at.get(active, 0.0) >= LIVE_S
        ):
            # Progress, counters and curves change many times a second: redrawing a table or a
            # plot that often is what made keys wait while a run trained.
            todo = {active}
        else:
            todo = set()
        with self.batch_update():
            for pane in todo:
                self._draw(pane)
                self.drawn_at[pane] = now
            line = self._status_line()
            # A step starting or ending shows at the next tick; a running step's count moves many
            # times a second and is a live figure: at most every LIVE_S, like the panes.
            coarse = self._status_line(progress=False)
            if line != self._last_status and (
                coarse != self._last_coarse or now - self.drawn_at.get("status", 0.0) >= LIVE_S
            ):
                self._last_status, self._last_coarse = line, coarse
                self.drawn_at["status"] = now
                # One line, cut with "…": a wrapped status would hide its end silently.
                self.status_bar.update(
                    Text(clean(line), no_wrap=True, overflow="ellipsis"), layout=False
                )  # one fixed line: no relayout
        self.dirty -= todo
        self.urgent -= todo

    def _draw(self, pane: str) -> None:
        if pane == "gates":
            self.gates_pane.show(list(self.gates.values()), self.started, self.notes_by_step())
        elif pane == "batch":
            rows = [g.row for g in self.gates.values() if g.phase == "inspect" and g.row is not None]
            self.batch_pane.show(rows[-1] if rows else None)
        elif pane == "counters":
            counters = self.counters_pane
            counters.show_ranks(*latest_ranks([g.row for g in self.gates.values() if g.row is not None]))
            machine = [g.row for g in self.gates.values() if g.phase == "machine" and g.row is not None]
            counters.show_machine(machine[-1] if machine else None)
            if self.saved is not None:
                peaks = [g.row.memory.peak() for g in self.gates.values() if g.row is not None]
                counters.show_saved(self.sections.get("environment", {}), [p for p in peaks if p is not None])
            else:
                counters.show(
                    self.nvml_snapshot, self.runner_counters, list(self.history), self.history_label
                )
                counters.show_cpu(self.cpu_sample)
        elif pane == "board":
            self.board_pane.show(
                self._runs(), list(self.sections.get("variants", [])), self.sections.get("board")
            )
        elif pane == "plan":
            plan = self.sections.get("plan")
            if plan is None and self.saved is not None:
                plan = self.provisional  # a record that stopped before its end
            self.plan_pane.show(plan, self.sections.get("conclusion"), self.sections.get("notes"))

    @functools.cached_property
    def provisional(self) -> dict[str, Any] | None:
        """The plan `pilot-tui plan` computes for a saved record without one: once, not per visit."""
        assert self.saved is not None
        try:
            plan = provisional_plan(self.saved.data, record_dir=self.saved.path.parent)
            return clean_tree(plan.as_toml())  # shown: inert (R24)
        except Exception as exc:  # a record too incomplete to plan from: say why
            return {"error": clean(f"no provisional plan: {type(exc).__name__}: {exc}")}

    def board_decision(self) -> dict[str, Any] | None:
        """`[board]` from the runs so far, as the session computes it (pure: no runner round trip)."""
        declared = getattr(getattr(self.source, "spec", None), "lr_board", None)
        if declared is None:
            return self.sections.get("board")
        runs = self.sections.get("runs", [])
        return board.compare(runs, declared.control, [declared.control, *declared.variants])

    def notes_by_step(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for note in self.sections.get("notes") or []:
            if isinstance(note, dict):
                out.setdefault(str(note.get("target", "")), []).append(str(note.get("text", "")))
        return out

    def _runs(self) -> list[RunRow]:
        """Record rows win; live points fill in runs whose row has not arrived yet."""
        runs = {r.id: r for r in read_runs(self.sections.get("runs", []))}
        for live in read_runs(list(self.live_runs.values())):
            runs.setdefault(live.id, live)
        return list(runs.values())

    def _status_line(self, progress: bool = True) -> str:
        if self.saved is not None:
            return self.status_text
        done = sum(1 for g in self.gates.values() if g.finished)
        running = [g for g in self.gates.values() if g.status == RUNNING]
        queued = sum(1 for g in self.gates.values() if g.status == QUEUED)
        parts = [f"{done}/{len(self.gates)} steps done"]
        if running:
            g = running[0]
            parts.append(f"running {g.label}" + (f" {g.done}/{g.total}" if g.total and progress else ""))
        if queued:
            parts.append(f"{queued} queued")
        if self.status_text == STARTING:
            # Opening can take minutes (a large dataset tokenised, a script's dataset.map).
            waited = time.monotonic() - self.started_at
            doing = getattr(self.source, "opening_stage", "") or OPENING
            parts.append(f"opening the campaign: {doing} ({waited:.0f} s)")
        elif self.status_text:
            parts.append(self.status_text)
        return " · ".join(parts)

    @on(TabbedContent.TabActivated)
    def handle_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A pane shown draws what changed while it was hidden before the first frame, except live
        figures (Counters, the Board): those show as last drawn at once and the new ones at the next
        tick (≤ REDRAW_S), so the key is answered without waiting for tables and curves."""
        pane = event.pane.id or ""
        if pane in self.dirty and (pane in self.urgent or pane not in LIVE_PANES):
            self._draw(pane)
            self.drawn_at[pane] = time.monotonic()
            self.dirty.discard(pane)
            self.urgent.discard(pane)

    # ------------------------------------------------------------------ worker messages

    @on(SessionReady)
    def handle_ready(self, msg: SessionReady) -> None:
        self.record_path = msg.record_path
        # The record file itself is written when the first step runs (see Session._begin_step).
        pid = getattr(self.source, "runner_pid", None)
        if pid is not None:  # a replay has no runner to wait for
            self.status_text = f"runner ready in {time.monotonic() - self.started_at:.1f} s (pid {pid})"
        else:
            self.status_text = "ready"
        device = str(msg.environment.get("device", "?"))
        self.counters_pane.set_campaign(msg.environment)  # its GPUs, matched to NVML by UUID
        if device == "cpu":
            self.gates_pane.set_cpu()
        self.sub_title = f"{self.sub_title.split(' · ')[0]} · {device}"
        freeze_heap()  # what opening the campaign built lives as long as the app
        if self.autorun:
            self.action_run_all()

    @on(SessionFailed)
    @on(CampaignStopped)
    def handle_failed(self, msg: SessionFailed) -> None:
        self.status_text = f"runner: {msg.reason}"
        # Exactly the steps the runner thread dropped (the failed one has no row: it may run again).
        for key in msg.dropped:
            if key in self.gates and self.gates[key].status in (QUEUED, RUNNING):
                self.started.pop(key, None)
                self._set_gate(self.gates[key].with_(status=WAITING))
        self.notify(msg.reason, title="runner", severity="error", timeout=10)

    @on(PhaseStartedMsg)
    def handle_phase_started(self, msg: PhaseStartedMsg) -> None:
        e = msg.event
        gate = self.gates.get(e.step) or GateState(
            key=e.step, label=StepKey(e.phase, e.variant).label, phase=e.phase, variant=e.variant
        )
        self.started[e.step] = time.monotonic()
        self._set_gate(gate.with_(status=RUNNING, params=dict(e.params), done=0, total=0, row=None))

    @on(PhaseProgressMsg)
    def handle_phase_progress(self, msg: PhaseProgressMsg) -> None:
        e = msg.event
        gate = self.gates.get(e.step)
        if gate is not None:
            self._set_gate(gate.with_(done=e.done, total=e.total, loss=e.loss, message=e.message))

    @on(PhaseFinishedMsg)
    def handle_phase_finished(self, msg: PhaseFinishedMsg) -> None:
        row = read_row(msg.event.row)
        gate = self.gates.get(msg.event.step) or gate_from_row(msg.event.row)
        self.started.pop(gate.key, None)
        if row.cancelled:
            # The record keeps the cancelled row; the step waits to run again under its own key.
            message = f"{row.reason} · n runs it again"
            self._set_gate(gate.with_(status=WAITING, row=None, message=message, done=0, total=0))
        else:
            self._set_gate(gate.with_(status=row.verdict, row=row))
        if gate.phase == "inspect":
            self.dirty.add("batch")
        self.dirty.add("counters")

    @on(CountersMsg)
    def handle_counters(self, msg: CountersMsg) -> None:
        e = msg.event
        self.runner_counters = (e.device, dict(e.values))
        if not (self.nvml_snapshot and self.nvml_snapshot.gpus):
            value = e.values.get("rss_mb", e.values.get("allocated_mb"))
            if value is not None:
                self.history.append(value)
                kind = "RSS" if "rss_mb" in e.values else "allocated"
                self.history_label = f"runner {kind} (MiB) while phases run"
        self.dirty.add("counters")

    @on(NvmlSampled)
    def handle_nvml_sampled(self, msg: NvmlSampled) -> None:
        self.nvml_snapshot = msg.snapshot
        gpus = msg.snapshot.gpus
        if gpus and gpus[0].memory_used_mb is not None:
            self.history.append(gpus[0].memory_used_mb)
            self.history_label = "GPU 0 memory used (NVML, MiB), last 30 s"
        self.dirty.add("counters")

    @on(RunUpdateMsg)
    def handle_run_update(self, msg: RunUpdateMsg) -> None:
        e = msg.event
        # Appended in place (O(1) per point, not a copy of the curve); the board re-plots on
        # `version`, at most twice a second.
        run = self.live_runs.setdefault(
            e.run_id, {"id": e.run_id, "losses": [], "loss_updates": [], "validation": [], "version": 0}
        )
        # Events are throttled (≤ 10/s), so each loss keeps its update number for the x axis.
        run["losses"].append(e.loss)
        run["loss_updates"].append(e.update)
        if e.validation is not None:
            run["validation"].append({"update": e.update, "loss": e.validation})
        run["status"] = e.status
        run["version"] += 1
        self.dirty.add("board")

    @on(RecordUpdateMsg)
    def handle_record_update(self, msg: RecordUpdateMsg) -> None:
        e = msg.event
        if e.section in LIST_SECTIONS:
            self.sections[e.section] = [*self.sections.get(e.section, []), e.value]
        else:
            self.sections[e.section] = e.value
        if e.section == "runs":
            self.sections["board"] = self.board_decision()
        self.dirty.update(("board", "plan"))

    @on(CpuSampled)
    def handle_cpu_sampled(self, msg: CpuSampled) -> None:
        self.cpu_sample = msg.sample
        self.dirty.add("counters")

    @on(RunnerErrorMsg)
    def handle_runner_error(self, msg: RunnerErrorMsg) -> None:
        self.notify(msg.event.message, title="runner error", severity="error", timeout=10)

    @on(RunnerIdle)
    def handle_runner_idle(self) -> None:
        self.dirty.add("gates")
        campaign = [g for g in self.gates.values() if g.key in self.campaign_keys]
        if campaign and all(g.finished for g in campaign) and self.runner is not None:
            self.runner.plan()  # every step ran: the choice sheet and package from the rows

    @on(RecordSaved)
    def handle_record_saved(self, msg: RecordSaved) -> None:
        if msg.error:
            self.notify(f"record not written: {msg.error}", title="save record", severity="error", timeout=10)
        else:
            self.record_path = msg.path
            self.notify(f"record written: {msg.path}", title="save record", timeout=8)

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (self.read_only and action in RUN_ACTIONS)

    def palette_allows(self, action: str) -> bool:
        name = action.split("(")[0]
        return bool(self.check_action(name, ()))

    def queue_steps(self, keys: list[str], overrides: dict[str, Any] | None = None) -> None:
        assert self.runner is not None
        for key in self.runner.submit(keys, overrides):
            self._set_gate(self.gates[key].with_(status=QUEUED))
        self.redraw()

    def action_next_step(self) -> None:
        """Run the next waiting step."""
        waiting = [g.key for g in self.gates.values() if g.status == WAITING]
        if not waiting:
            self.notify("every step has run or is queued", severity="warning")
            return
        self.queue_steps(waiting[:1])

    def action_run_all(self) -> None:
        """Queue every waiting step, in campaign order."""
        waiting = [g.key for g in self.gates.values() if g.status == WAITING]
        if not waiting:
            self.notify("every step has run or is queued", severity="warning")
            return
        self.queue_steps(waiting)

    def action_cancel_phase(self) -> None:
        """Cancel the running step and drop the queued ones."""
        assert self.runner is not None
        running = self.runner.current
        for key in self.runner.cancel():
            self._set_gate(self.gates[key].with_(status=WAITING))
        if running:
            self.notify(f"cancelling {running}…", title="cancel")
        else:
            self.notify("nothing is running", severity="warning")
        self.redraw()

    def action_rerun(self) -> None:
        """Run the selected step again under its own key: a new row, the old one kept (R14)."""
        gate = self.selected_gate
        if gate is None or gate.status in (QUEUED, RUNNING):
            self.notify("select a step that is not queued or running", severity="warning")
            return
        key = gate.key.split("#")[0]
        self.queue_steps([key])

    def action_toggle_detail(self) -> None:
        """Gates: the selected step's details or one line; Plan: the whole plan or its summary."""
        if self.tabs.active == "plan":
            self.plan_pane.toggle_detail()
        else:
            self.gates_pane.toggle_detail()

    def action_variant(self) -> None:
        """Re-run the selected phase as a new variant with overrides (a form asks which)."""
        gate = self.selected_gate
        if gate is None:
            self.notify("select a row in Gates first", severity="warning")
            return
        taken = {g.variant for g in self.gates.values()} | {StepKey.parse(k).variant for k in self.gates}
        spec = getattr(self.source, "spec", None)
        if spec is not None:
            taken |= {v.id for v in spec.variants}
        variant = next_variant_id(taken)
        current = dict((gate.row.params if gate.row is not None else None) or gate.params)
        if not current and spec is not None:
            current = {d.params_key: dimensions.control_value(spec, d) for d in dimensions.in_form()}

        # A memory variant is measured on all of its phases, so it gets a [[variants]] entry
        # compared with the control (R11); any other phase is re-run alone.
        measured = phase_table.per_variant()
        phases = list(measured) if gate.phase in measured else [gate.phase]

        def chosen(overrides: dict[str, Any] | None) -> None:
            if overrides is None:
                return
            steps = [StepKey(phase, variant) for phase in phases]
            keys = [s.key for s in steps]
            for s in steps:
                self.gates[s.key] = GateState(key=s.key, label=s.label, phase=s.phase, variant=variant)
            changes = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "no change"
            self.notify(f"{', '.join(keys)}: {changes}", title="new variant")
            self.queue_steps(keys, overrides)

        self.push_screen(VariantForm(gate.phase, variant, current), chosen)

    def action_save_record(self) -> None:
        """Write the record (it is also saved after every phase) and show its path."""
        if self.saved is not None:
            self.notify(f"read-only record, nothing to write: {self.saved.path}", title="save record")
            return
        assert self.runner is not None
        if self.runner.busy:
            self.notify("the record is written when the running step ends", title="save record")
        self.runner.save_record()

    def action_note(self) -> None:
        """An observation on the selected row (its step key once it ran), kept in `[[notes]]`."""
        gate = self.selected_gate
        target = gate.key.split("#")[0] if gate and gate.row is not None else "campaign"
        self.push_screen(TextPrompt(f"Note on [b]{target}[/b]"), lambda r: self.write_note("note", target, r))

    def action_conclude(self) -> None:
        """The campaign's conclusion, and the configuration kept (`[conclusion]`)."""
        prompt = TextPrompt("Campaign conclusion", second="decision (the configuration kept, e.g. control)")
        self.push_screen(prompt, lambda r: self.write_note("conclusion", "", r))

    def write_note(self, kind: str, target: str, answer: dict[str, str] | None) -> None:
        """Live: into the session's record on the runner thread (between saves); saved: the file."""
        if not answer:
            return
        if self.runner is None:
            assert self.saved is not None
            try:
                if kind == "note":
                    notes.add_note(self.saved.path, target, answer["text"])
                else:
                    notes.set_conclusion(self.saved.path, answer["text"], decision=answer["second"])
                self.note_written(kind, Record.read(self.saved.path).data, "")
            except (RecordError, OSError) as exc:
                self.notify(str(exc), title=kind, severity="error")
            return

        def write(record: Record | None) -> None:
            error, data = "", {}
            try:
                if record is None:
                    raise RecordError("no record yet: the runner has not started")
                if kind == "note":
                    record.append("notes", notes.make_note(record.data, target, answer["text"]))
                else:
                    entry = notes.make_conclusion(answer["text"], answer["second"])
                    record.set_section("conclusion", entry)
                record.save()
                data = {k: record.data[k] for k in ("notes", "conclusion") if k in record.data}
            except (RecordError, OSError) as exc:
                error = str(exc)
            # Posted, not `call_from_thread`: that blocks this thread on the UI loop, which
            # waits for this thread while the app closes.
            self.post_message(NoteWritten(kind, data, error))

        if self.runner.busy:
            self.notify(f"the {kind} is written when the running step ends", title=kind)
        self.runner.call(write)

    @on(NoteWritten)
    def handle_note_written(self, msg: NoteWritten) -> None:
        self.note_written(msg.kind, msg.data, msg.error)

    def note_written(self, kind: str, data: dict[str, Any], error: str) -> None:
        if error:
            self.notify(error, title=kind, severity="error", timeout=10)
            return
        for section in ("notes", "conclusion"):
            if section in data:
                self.sections[section] = data[section]
        self.dirty.update(("plan", "gates"))  # the notes list, and the note's mark on its step
        self.notify(f"{kind} written to {self.record_path}", title=kind)

    def action_show_pane(self, pane: str) -> None:
        """Switch tab and move focus into it (a focused widget in a hidden pane would pull back)."""
        self.tabs.active = pane
        self.focus_target(pane).focus()

    def focus_target(self, pane: str) -> Widget:
        targets = {"gates": "#gate-table", "board": "#run-table"}
        selector = targets.get(pane)
        pane_widget = self.panes[pane]
        if selector and pane_widget.query_one(selector).display:
            return pane_widget.query_one(selector)
        return pane_widget

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP_KEYS))

    def action_request_quit(self) -> None:
        """Quit; while a phase runs, ask first, then cancel it and close the runner cleanly."""
        d = self.runner
        if d is None or not (d.busy or d.pending()):
            self.exit(0)
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.status_text = "cancelling the running phase and closing the runner…"
                self.exit(0)

        self.push_screen(ConfirmScreen("A phase is running. Cancel it and quit?"), answer)

    def action_quit(self) -> None:  # type: ignore[override]
        """The palette's and Textual's quit ask too, like q."""
        self.action_request_quit()


def interrupted_banner(data: dict[str, Any]) -> str:
    """What a re-opened record that stopped before its end says first: steps planned vs done."""
    if "plan" in data:
        return ""
    done = {row.recorded_key for row in read_rows(data.get("phases"))}
    try:
        planned = [s.key for s in campaign_steps(spec_of(data))]
    except Exception:
        planned = []
    in_flight = (data.get("campaign") or {}).get("in_flight")
    text = f"INTERRUPTED: {len(done & set(planned))} of {len(planned)} planned steps done"
    if in_flight:
        text += f"; {in_flight} was running when it stopped"
    return text + " · the plan shown is provisional"
