"""Dashboard responsiveness measured from outside, the way a person sees it.

    .venv/bin/python benchmarks/ui.py [--cycles 8]          # needs `pyte` (pip install pyte)

The dashboard runs in a real pseudo-terminal (80×24) exactly as `pilot-tui CAMPAIGN` runs; keys
are written to the terminal and a terminal emulator (pyte) reads what the app draws. A latency is
the time from writing a key to the first screen update on which that key's effect is visible (the
pane's own text after `1`…`5`; the selected step's line after `up`/`down` in Gates).

Beside it, in the same run, a *control arm*: a bare Textual app of the same screen (the dashboard's
widget tree, ids and stylesheet, the idle dashboard's text, the same footer keys; `a` shows an LR
run on its Board as the dashboard's does), with none of the dashboard's work, in its own
pseudo-terminal. Both are measured with the runner idle, then while an LR run trains in the
dashboard's runner (both apps share the machine with that training), a cycle of keys each in turn.

Printed: start-up to the first full frame (both apps), time until "runner ready" is shown,
p50/p95/max per series, pilot p95 / control p95, and the longest wait for any key while training.
Targets: pane switch while training p95 ≤ 1.2 × the control's in the same run, start-up ≤ 1.05 ×
the control's, no wait > 200 ms while the runner trains.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COLS, ROWS = 80, 24
BOUND_S = 10.0  # a key with no visible effect within this is reported as a failure
KEYS = {"down": b"\x1b[B", "up": b"\x1b[A"}
# Text each pane shows once switched to, in both apps (the control's panes say the same).
PANE_MARK = {
    "1": lambda s: " status " in s and " step " in s,
    "2": lambda s: "inspect" in s,
    "3": lambda s: "GPUs (NVML)" in s,
    "4": lambda s: "loss per update" in s or "No LR runs yet" in s,
    "5": lambda s: "Choice sheet" in s or "No plan yet" in s,
}


# ----------------------------------------------------------------------------- terminal


class Terminal:
    """A program in a pseudo-terminal, its screen kept by pyte; predicates timed on each update."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        import pyte

        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        full_env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS), **(env or {}))
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=full_env, cwd=REPO, start_new_session=True
        )
        os.close(slave)
        self.fd = master
        self.lock = threading.Lock()
        self.updates = 0
        self.per_key: dict[str, list[float]] = {}
        self._pending: tuple[Callable[[str], bool], threading.Event, list[float]] | None = None
        threading.Thread(target=self._read, daemon=True, name="pty-reader").start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            now = time.perf_counter()
            with self.lock:
                self.stream.feed(data)
                self.updates += 1
                pending = self._pending
                if pending is not None and pending[0](self.text()):
                    pending[2].append(now)
                    pending[1].set()
                    self._pending = None

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait(self, predicate: Callable[[str], bool], bound_s: float = BOUND_S) -> float:
        """perf_counter time of the first update on which `predicate(screen)` holds."""
        done, at = threading.Event(), []
        with self.lock:
            if predicate(self.text()):
                return time.perf_counter()
            self._pending = (predicate, done, at)
        if not done.wait(bound_s):
            with self.lock:
                self._pending = None
                tail = self.text()
            raise TimeoutError(f"nothing visible within {bound_s:g} s; screen:\n{tail}")
        return at[0]

    def press(self, key: str, predicate: Callable[[str], bool]) -> float:
        """Seconds from writing `key` to the first update showing its effect."""
        done, at = threading.Event(), []
        with self.lock:
            self._pending = (predicate, done, at)
            t0 = time.perf_counter()
            os.write(self.fd, KEYS.get(key, key.encode()))
        if not done.wait(BOUND_S):
            with self.lock:
                self._pending = None
                tail = self.text()
            raise TimeoutError(f"{key!r}: nothing visible within {BOUND_S:g} s; screen:\n{tail}")
        return at[0] - t0

    def send(self, key: str) -> None:
        os.write(self.fd, KEYS.get(key, key.encode()))

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        os.close(self.fd)


# ----------------------------------------------------------------------------- the control arm


def control_class() -> type:
    """A bare Textual app of the dashboard's layout and keys, and no work of its own.

    The same widget tree as the dashboard's (header, five tabs whose panes hold the same widget
    types with the same ids, status line, footer with the same keys shown), laid out by the
    dashboard's own stylesheet, showing the same text an idle dashboard shows. What it lacks is
    everything the dashboard does: no runner, no state, no redraws; a switch moves focus into the
    pane shown, as the dashboard's does.
    """
    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import Vertical, VerticalScroll
    from textual.screen import Screen
    from textual.widgets import DataTable, Header, Label, Sparkline, Static, TabbedContent, TabPane

    # The dashboard's Textual-level helpers (no dashboard logic in them): the footer that rebuilds
    # only when its keys change, and focus changes that repaint and restyle only what they change.
    # Without them this app pays Textual's defaults, which the dashboard does not: the ratio then
    # measures the dashboard's own work, not its care with Textual.
    from pilot_tui.tui.focus import QuietFocusScreen, RestyleSelfOnFocus
    from pilot_tui.tui.footer import QuietFooter
    from pilot_tui.tui.panes.board import RUN_COLUMNS, LossPlot

    # The idle dashboard's text for this campaign (no inspect row, no runs, no plan, no NVML).
    batch = "No inspect row yet: the inspect phase has not run in this campaign (or it is skipped)."
    board = "No LR runs yet: they appear here when the lr_run steps run."
    plan = "No plan yet. The choice sheet and the 3/7/30-day package are built from the measured phases."

    # Named as the dashboard's panes so that its stylesheet lays them out the same way.
    class GatesPane(Vertical):
        def compose(self) -> ComposeResult:
            yield DataTable(id="gate-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="gate-detail-box", classes="collapsed"):
                yield Static(id="gate-detail")

    class BatchPane(RestyleSelfOnFocus, VerticalScroll):
        def compose(self) -> ComposeResult:
            yield Static(Text(batch, style="dim"), id="batch-body")

    class CountersPane(RestyleSelfOnFocus, VerticalScroll):
        def compose(self) -> ComposeResult:
            yield Label("GPUs (NVML)", classes="section")
            yield Static(
                "NVML: driver not found (no libnvidia-ml: this machine has no NVIDIA driver); "
                "showing the runner's CPU memory instead.",
                id="nvml",
            )
            yield Label("Runner process", classes="section")
            yield Static("no counters yet: they arrive while a phase runs", id="runner")
            yield Static(
                "runner         pid 4242 · CPU 0% of one core · 4 threads\n"
                "system memory  █░░░░░░░░░░░ 2.1/23.5 GiB used\n"
                "load average   4.20 on 2 cores",
                id="cpu",
            )
            yield Label("Ranks", id="ranks-label", classes="section").set_styles("display: none;")
            yield Static("", id="ranks").set_styles("display: none;")
            yield Label("History: nothing sampled yet", id="history-label", classes="section")
            yield Sparkline([], id="history")

    class BoardPane(RestyleSelfOnFocus, Vertical, can_focus=True):
        def compose(self) -> ComposeResult:
            yield Static("", id="board-decision").set_styles("display: none;")
            yield Static(board, id="board-empty")
            yield DataTable(id="run-table", cursor_type="row", zebra_stripes=True)
            yield LossPlot(id="loss-plot")
            yield Static(id="variants")

        def on_mount(self) -> None:
            table = self.query_one("#run-table", DataTable)
            for name in RUN_COLUMNS:
                table.add_column(name, key=name)
            table.display = self.query_one(LossPlot).display = False

        def show_run(self) -> None:
            """What the dashboard's Board shows while its LR run trains: the run's row and a curve
            (drawn once: the dashboard re-plots as points come, this one has no work to do)."""
            table = self.query_one("#run-table", DataTable)
            table.add_row(*(Text(c) for c in ("lr1e-4-s0", "1e-4", "0", "running", "", "2.31", "—")))
            plot = self.query_one(LossPlot)
            plot.plt.title("loss per update")
            plot.plt.plot(list(range(1, 201)), [3.0 - i / 100 for i in range(200)], marker="braille")
            self.query_one("#board-empty").display = False
            table.display = plot.display = True

    class PlanPane(RestyleSelfOnFocus, VerticalScroll):
        def compose(self) -> ComposeResult:
            yield Static(Text(plan, style="dim"), id="plan-body")

    panes = {
        "gates": GatesPane,
        "batch": BatchPane,
        "counters": CountersPane,
        "board": BoardPane,
        "plan": PlanPane,
    }

    class Control(App[None]):
        CSS_PATH = str(REPO / "pilot_tui" / "tui" / "app.tcss")
        BINDINGS = [  # noqa: RUF012
            *(Binding(str(i), f"show('{p}')", p, show=False) for i, p in enumerate(panes, start=1)),
            # The keys the dashboard's footer shows, each its own action as there (inert but `a`).
            Binding("n", "nothing('next')", "next"),
            Binding("a", "train", "all"),
            Binding("v", "nothing('variant')", "variant"),
            Binding("c", "nothing('cancel')", "cancel"),
            Binding("e", "nothing('save')", "save record"),
            Binding("question_mark", "nothing('help')", "help"),
            Binding("q", "quit", "quit"),
        ]

        def get_default_screen(self) -> Screen:
            return QuietFocusScreen(id="_default")

        def compose(self) -> ComposeResult:
            yield Header(show_clock=False)
            yield Static(id="banner").set_styles("display: none;")
            with TabbedContent(initial="gates", id="tabs"):
                for i, (pane, widget) in enumerate(panes.items(), start=1):
                    with TabPane(f"{i} {pane.title()}", id=pane):
                        yield widget()
            yield Static("0/24 steps done · runner ready in 5.0 s (pid 4242)", id="status")
            yield QuietFooter()

        def on_mount(self) -> None:
            table = self.query_one("#gate-table", DataTable)
            for name, width in (("", 1), ("step", 20), ("status", 11), ("time", 7), ("peak RSS", 9)):
                table.add_column(name, width=width)
            table.add_column("reason", width=20)
            for key in bench_steps():
                table.add_row(
                    Text("·"), Text(key[:20]), Text("waiting"), *(Text("") for _ in range(3)), key=key
                )
            table.focus()

        def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
            self.query_one("#gate-detail", Static).update(f"d▸ {event.row_key.value} · waiting · not run yet")

        def action_nothing(self, what: str) -> None:
            pass

        def action_train(self) -> None:
            """`a` starts the dashboard's LR run: the Board then shows it (here, drawn once)."""
            self.query_one(BoardPane).show_run()

        def action_show(self, pane: str) -> None:
            """Switch, and focus into the pane as the dashboard does: Textual alone would move focus
            from the hidden table to its pane's detail box, and the tabs would switch back to it."""
            self.query_one(TabbedContent).active = pane
            widget = self.query_one(panes[pane])
            target = {"gates": "#gate-table"}.get(pane)
            (widget.query_one(target) if target else widget).focus()

    return Control


def control_app() -> None:
    control_class()().run()


# ----------------------------------------------------------------------------- the campaign


def campaign(folder: Path) -> Path:
    """The demo made small, with one long LR run (and the engine phases before it) to train."""
    raw = tomllib.loads((REPO / "campaigns" / "demo.toml").read_text())
    raw["task"]["options"] = {"n_conversations": 60, "seed": 0}
    raw["batch"].update(microbatch=2, accumulation=2)
    raw["phases"] = {
        "steady_updates": 4,
        "skip": ["stack", "inspect", "split", "overfit", "eval_longest", "save", "export", "resume", "final"],
    }
    raw.pop("variants", None)
    raw.pop("fit_search", None)
    raw["lr_board"] = {
        "control": 1e-4,
        "variants": [2e-4],
        "seeds": [0],
        "updates": 100000,
        "validate_every": 200,
    }
    raw["limits"] = {}
    path = folder / "bench.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def bench_steps() -> list[str]:
    from pilot_tui.core.spec import load_spec
    from pilot_tui.core.steps import campaign_steps

    folder = Path(os.environ.get("BENCH_DIR", tempfile.gettempdir()))
    return [s.key for s in campaign_steps(load_spec(folder / "bench.toml").spec)]


# ----------------------------------------------------------------------------- measuring


def selected(key: str) -> Callable[[str], bool]:
    return lambda s: f"d▸ {key} ·" in s


def series(term: Terminal, steps: list[str], cycles: int, start_row: int) -> tuple[list[float], list[float]]:
    """(pane switches 1→2→…→5→1, cursor moves down/up in Gates), spaced like a person's keys."""
    switches, cursor = [], []
    order = ["2", "3", "4", "5", "1"]
    for _ in range(cycles):
        for key in order:
            switches.append(term.press(key, PANE_MARK[key]))
            term.per_key.setdefault(key, []).append(switches[-1])
            time.sleep(0.12)
        for i in range(4):
            down = i % 2 == 0
            row = start_row + (1 if down else 0)
            cursor.append(term.press("down" if down else "up", selected(steps[row])))
            time.sleep(0.12)
    return switches, cursor


def interleaved(
    arms: tuple[tuple[Terminal, int], ...], steps: list[str], cycles: int
) -> list[tuple[list[float], list[float]]]:
    """`series` of each arm, one cycle of each in turn: both see the same load, however it moves."""
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in arms]
    for _ in range(cycles):
        for (term, start), (switches, cursor) in zip(arms, out, strict=True):
            s, c = series(term, steps, 1, start)
            switches.extend(s)
            cursor.extend(c)
    return out


def stats(ms: list[float]) -> tuple[float, float, float]:
    s = sorted(x * 1000 for x in ms)
    return statistics.median(s), s[min(len(s) - 1, round(0.95 * (len(s) - 1)))], s[-1]


def line(name: str, values: list[float]) -> str:
    p50, p95, top = stats(values)
    return f"    {name:<34} p50 {p50:6.1f} ms · p95 {p95:6.1f} ms · max {top:6.1f} ms  (n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=8, help="rounds of 5 pane switches + 4 cursor moves")
    ap.add_argument("--control", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.control:
        control_app()
        return 0
    try:
        import pyte  # noqa: F401
    except ImportError:
        print("benchmarks/ui.py needs pyte: .venv/bin/pip install pyte", file=sys.stderr)
        return 2
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = campaign(folder)
        env = {"BENCH_DIR": str(folder)}
        os.environ["BENCH_DIR"] = str(folder)
        steps = bench_steps()
        pilot = Terminal([sys.executable, "-m", "pilot_tui", str(spec), "--records", str(folder / "r")], env)
        control = Terminal([sys.executable, str(Path(__file__).resolve()), "--control"], env)
        try:
            full = lambda s: "1 Gates" in s and " status " in s and "quit" in s  # noqa: E731
            start_pilot = pilot.wait(full) - pilot.t_spawn
            start_control = control.wait(full) - control.t_spawn
            ready = pilot.wait(lambda s: "runner ready" in s, 120) - pilot.t_spawn
            # Cursor on row 0 in both (the dashboard's follows nothing yet).
            idle_p, idle_c = interleaved(((pilot, 0), (control, 0)), steps, args.cycles)
            pilot.send("a")
            control.send("a")  # its Board shows a run too, as the dashboard's will
            first_lr = steps.index(next(k for k in steps if k.startswith("lr_run@")))
            pilot.wait(lambda s: "▶" in s and "lr_run" in s, 300)
            pilot.wait(lambda s: "/100000" in s, 300)  # the LR run is training
            time.sleep(1.0)
            # The dashboard's cursor followed the running LR run: measure around it.
            busy_p, busy_c = interleaved(((pilot, first_lr), (control, 0)), steps, args.cycles)
            trained = pilot.text()
            pilot.send("c")
        finally:
            pilot.close()
            control.close()
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {cores} cores · load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"start-up to first full frame: pilot {start_pilot * 1000:.0f} ms · control {start_control * 1000:.0f} ms"
    )
    print(f"runner ready shown: {ready * 1000:.0f} ms after launch")
    for title, p, c in (("runner idle", idle_p, idle_c), ("LR run training", busy_p, busy_c)):
        print(f"{title}:")
        print(line("pilot   pane switch 1-5", p[0]))
        print(line("control pane switch 1-5", c[0]))
        print(line("pilot   Gates cursor", p[1]))
        print(line("control Gates cursor", c[1]))
        pp95 = stats(p[0] + p[1])[1]
        cp95 = stats(c[0] + c[1])[1]
        print(f"    all keys: pilot p95 {pp95:.1f} ms / control p95 {cp95:.1f} ms = {pp95 / cp95:.2f}")
    for name, term in (("pilot", pilot), ("control", control)):
        per = " · ".join(f"{k} {statistics.median(v) * 1000:.0f}" for k, v in sorted(term.per_key.items()))
        print(f"    {name} median ms per pane key (idle and training together): {per}")
    switch_ratio = stats(busy_p[0])[1] / stats(busy_c[0])[1]
    start_ratio = start_pilot / start_control
    print(
        f"pane switch while training: pilot p95 / control p95 = {switch_ratio:.2f} "
        f"(target ≤ 1.2: {'met' if switch_ratio <= 1.2 else 'NOT met'})"
    )
    print(
        f"start-up: pilot / control = {start_ratio:.2f} (target ≤ 1.05: {'met' if start_ratio <= 1.05 else 'NOT met'})"
    )
    worst = max(busy_p[0] + busy_p[1]) * 1000
    print(f"longest wait for a key while training (pilot): {worst:.0f} ms (target ≤ 200 ms)")
    progress = next((x for x in trained.splitlines() if "/100000" in x), "").strip()
    print(f"training row at the end: {progress}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
