"""Counters pane: live per-GPU NVML figures, the runner's own memory counters, a short history.

GPUs are matched to the campaign by UUID, never by index: NVML numbers every GPU of the machine,
the runner's `cuda:0` is the first GPU `CUDA_VISIBLE_DEVICES` lets it see. The campaign's GPU is
marked, and the processes on each GPU are listed (NVML, refreshed every few seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Label, Sparkline, Static

from ...core.rows import PhaseRow, RankRow
from ...core.text import one_line
from ..cpu import CpuSample
from ..focus import RestyleSelfOnFocus
from ..nvml import GpuSample, NvmlSnapshot, campaign_gpus, match_runner
from ..ranks import rank_table
from ..state import bar, fmt_mb, fmt_value

# The runner's counters, in the order shown; allocated and reserved side by side, never summed.
CUDA_KEYS = (
    ("allocated_mb", "allocated"),
    ("reserved_mb", "reserved"),
    ("peak_allocated_mb", "peak allocated"),
    ("peak_reserved_mb", "peak reserved"),
)
CPU_KEYS = (("rss_mb", "process RSS"), ("peak_rss_mb", "peak RSS"))
CAMPAIGN_MARK = "▶"


def _na(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def gpu_table(gpus: Sequence[GpuSample], campaign: dict[str, str] | None = None) -> Table:
    """One line per GPU: memory used/total as a bar, utilisation, temperature, power (fits 80 cols).

    The campaign's GPU (matched by UUID) is marked and named as the runner names it (`cuda:0`).
    """
    campaign = campaign or {}
    table = Table(box=None, padding=(0, 1), expand=True)
    table.add_column("gpu", no_wrap=True, overflow="ellipsis", ratio=1)
    for name in ("memory", "used/total", "util", "temp", "power"):
        table.add_column(name, no_wrap=True)
    for g in gpus:
        if g.memory_used_mb is not None and g.memory_total_mb:
            mem_bar = bar(int(g.memory_used_mb), int(g.memory_total_mb), 12)
            used = f"{g.memory_used_mb / 1024:.1f}/{g.memory_total_mb / 1024:.0f} GiB"
        else:
            mem_bar, used = "n/a", "n/a"
        power = _na(g.power_w, "{:.0f}")
        power += f"/{g.power_limit_w:.0f} W" if g.power_w is not None and g.power_limit_w else " W"
        label = Text(f"{g.index} {g.name.removeprefix('NVIDIA ')}")
        if g.uuid and g.uuid in campaign:
            label = Text(f"{CAMPAIGN_MARK} ", style="bold green") + label + Text(f" = {campaign[g.uuid]}")
        table.add_row(
            label,
            Text(mem_bar, style="magenta"),
            used,
            _na(g.utilization, "{}%"),
            _na(g.temperature_c, "{}°C"),
            power if g.power_w is not None else "n/a",
        )
    return table


def process_table(
    gpus: Sequence[GpuSample], campaign: dict[str, str], reserved_mb: float | None, pid: int | None = None
) -> Table | None:
    """The processes on each GPU (None until NVML's first, slow, process list has come)."""
    if all(g.processes is None for g in gpus):
        return None
    table = Table(box=None, padding=(0, 1))
    for name in ("gpu", "pid", "memory", ""):
        table.add_column(name, no_wrap=True)
    for g in gpus:
        if g.processes is None:
            table.add_row(str(g.index), "n/a", "", Text("process list not available", style="dim"))
            continue
        if not g.processes:
            table.add_row(str(g.index), "-", "", Text("no process", style="dim"))
            continue
        ours = g.uuid in campaign
        runner = match_runner(g.processes, reserved_mb, pid) if ours else None
        for proc in g.processes:
            note = Text("the runner", style="bold green") if proc.pid == runner else Text("")
            table.add_row(
                str(g.index), str(proc.pid), fmt_mb(proc.used_mb) if proc.used_mb is not None else "n/a", note
            )
    return table


def runner_table(device: str, values: dict[str, float]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    keys = CUDA_KEYS if any(k in values for k, _ in CUDA_KEYS) else CPU_KEYS
    grid.add_row("device", Text(device))
    for key, label in keys:
        if key in values:
            grid.add_row(label, fmt_mb(values[key]))
    return grid


def history_range(history: Sequence[float]) -> str:
    """The sparkline's scale: its lowest bar is the minimum, its highest the maximum."""
    if not history:
        return ""
    low, high = min(history), max(history)
    return f" · ▁ {low:,.0f} … █ {high:,.0f} MiB"


def cpu_table(sample: CpuSample) -> Table:
    """One line each: runner pid and CPU %, its RSS, the system memory; n/a where unreadable."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    runner = f"pid {sample.pid}" if sample.pid is not None else "not running"
    if sample.cpu_percent is not None:
        runner += f" · CPU {sample.cpu_percent:.0f}% of one core"
    if sample.threads is not None:
        runner += f" · {sample.threads} threads"
    grid.add_row("runner", Text(runner))
    if sample.system_used_mb is not None and sample.system_total_mb:
        used, total = sample.system_used_mb, sample.system_total_mb
        grid.add_row(
            "system memory",
            Text(f"{bar(int(used), int(total), 12)} {used / 1024:.1f}/{total / 1024:.1f} GiB used"),
        )
    if sample.load_avg_1m is not None:
        grid.add_row("load average", Text(f"{sample.load_avg_1m:.2f} on {sample.cores} cores"))
    return grid


class CountersPane(RestyleSelfOnFocus, VerticalScroll):
    """NVML view of each GPU (or why there is none) beside the runner's allocator / RSS counters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # UUID -> `cuda:N` of the campaign's GPUs, from the runner's environment (`set_campaign`).
        self.campaign: dict[str, str] = {}
        self.runner_pid: int | None = None

    def set_campaign(self, environment: dict[str, Any], runner_pid: int | None = None) -> None:
        """Which GPUs are the campaign's (by UUID), from the environment the runner reported."""
        self.campaign = campaign_gpus(environment)
        self.runner_pid = runner_pid

    def compose(self) -> ComposeResult:
        yield Label("GPUs (NVML)", classes="section")
        yield Static("NVML: not read yet", id="nvml")
        yield Label("Runner process", classes="section")
        yield Static("no counters yet: they arrive while a phase runs", id="runner")
        yield Static("", id="cpu")
        # Hidden until the machine check has run: its figures beside the live counters.
        yield Label("Machine check", id="machine-label", classes="section").set_styles("display: none;")
        yield Static("", id="machine").set_styles("display: none;")
        # Hidden until a phase runs on several ranks: a one-process campaign's pane is unchanged.
        yield Label("Ranks", id="ranks-label", classes="section").set_styles("display: none;")
        yield Static("", id="ranks").set_styles("display: none;")
        yield Label("History", id="history-label", classes="section")
        yield Sparkline([], id="history")

    def show(
        self,
        nvml: NvmlSnapshot | None,
        runner: tuple[str, dict[str, float]] | None,
        history: Sequence[float],
        history_label: str,
    ) -> None:
        """Redraw from the app's latest samples (at most ~10×/s, only while visible).

        Each widget is updated only when what it would show changed since it was last drawn
        (its text, not the raw sample): a switch back to this pane re-renders nothing else.
        """
        if nvml is None:
            self._set("#nvml", lambda: Text("NVML: not read yet", style="dim"), "none", key="none")
        elif nvml.error:
            text = f"{nvml.error}; showing the runner's CPU memory instead."
            self._set("#nvml", lambda: Text(text, style="yellow"), text, key=text)
        else:
            reserved = runner[1].get("reserved_mb") if runner is not None else None
            processes = process_table(nvml.gpus, self.campaign, reserved, self.runner_pid)
            # The shape (lines taken) decides a relayout; a new sample of the same GPUs redraws in place.
            shape = (len(nvml.gpus), None if processes is None else processes.row_count)

            def gpus() -> Any:
                table = gpu_table(nvml.gpus, self.campaign)
                if processes is None:
                    return table
                heading = Text("Processes (NVML, every few seconds)", style="bold")
                return Group(table, Text(""), heading, processes)

            self._set("#nvml", gpus, shape, key=(nvml.gpus, reserved, shape, tuple(self.campaign.items())))
        if runner is not None:
            device, values = runner
            shown = (device, tuple((k, fmt_mb(v)) for k, v in values.items()))
            self._set("#runner", lambda: runner_table(device, values), tuple(values), key=shown)
        data = list(history)
        sparkline = self.query_one("#history", Sparkline)
        if sparkline.data != data:
            sparkline.data = data
        label = f"History: {history_label}{history_range(history)}"
        self._set("#history-label", lambda: Text(label), 1, key=label)

    def _set(self, selector: str, content: Any, shape: Any, always: bool = False, key: Any = None) -> None:
        """Update a widget; relayout only when its shape (lines it takes) may have changed.

        A live figure redraws in place: a relayout of the whole screen at every sample is what
        kept keys waiting while a run trained. `always=False` skips an unchanged shape;
        a `key` equal to the one last drawn skips the update altogether (`content` may then be a
        callable, built only when drawn).
        """
        shapes: dict[str, Any] = self.__dict__.setdefault("_shapes", {})
        keys: dict[str, Any] = self.__dict__.setdefault("_keys", {})
        same = shapes.get(selector, object()) == shape
        if key is not None:
            if same and keys.get(selector, object()) == key:
                return
            keys[selector] = key
        elif same and not always:
            return
        shapes[selector] = shape
        self.query_one(selector, Static).update(content() if callable(content) else content, layout=not same)

    def show_cpu(self, sample: CpuSample | None) -> None:
        """The runner's pid, CPU % and RSS and the system memory (psutil), beside its counters."""
        widget = self.query_one("#cpu", Static)
        # No runner process (a replay, or before it starts): nothing of its own to show.
        shown = sample is not None and sample.pid is not None
        if widget.display != shown:
            widget.display = shown
        if sample is not None and sample.pid is not None:
            # What the lines say, at the precision they say it: an unchanged text is not redrawn.
            key = (
                sample.pid,
                None if sample.cpu_percent is None else round(sample.cpu_percent),
                sample.threads,
                None if sample.system_used_mb is None else round(sample.system_used_mb / 102.4),
                sample.system_total_mb,
                None if sample.load_avg_1m is None else round(sample.load_avg_1m, 2),
            )
            self._set("#cpu", lambda: cpu_table(sample), (sample.system_total_mb is None,), key=key)

    def show_ranks(self, step: str, ranks: Sequence[RankRow]) -> None:
        """The last phase that ran on several ranks: one line per rank (R22)."""
        if not ranks:
            return
        label, table = self.query_one("#ranks-label", Label), self.query_one("#ranks", Static)
        label.update(Text(f"Ranks ({len(ranks)}), last phase on several: {step}"))
        table.update(rank_table(ranks))
        label.display = table.display = True

    def show_machine(self, row: PhaseRow | None) -> None:
        """The machine check's figures (docs/machine.md): its verdict, and each check's line."""
        if row is None:
            return
        label, body = self.query_one("#machine-label", Label), self.query_one("#machine", Static)
        key = (row.verdict, row.reason, row.started)
        if self.__dict__.get("_machine_key") == key:
            return
        self.__dict__["_machine_key"] = key
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True, style="bold")
        table.add_column()
        styles = {"pass": "green", "warn": "yellow", "fail": "red"}
        for check in row.details.get("checks") or []:
            if isinstance(check, dict):
                verdict = str(check.get("verdict", ""))
                table.add_row(
                    Text(f"{check.get('name', '')}", style=styles.get(verdict, "")),
                    Text(one_line(str(check.get("message", "")), 300)),
                )
        label.update(Text(f"Machine check: {row.verdict}"))
        body.update(table)
        label.display = body.display = True

    def show_saved(self, environment: dict[str, Any], peaks: list[float]) -> None:
        """A saved record has no live samples: its devices, and each phase's peak as history."""
        self.campaign = campaign_gpus(environment)
        devices = environment.get("devices") or []
        if devices:
            table = Table(box=None, padding=(0, 1))
            for key in devices[0]:
                table.add_column(str(key))
            for d in devices:
                table.add_row(*(Text(fmt_value(v)) for v in d.values()))
            self.query_one("#nvml", Static).update(table)
        else:
            device = environment.get("device", "?")
            self.query_one("#nvml", Static).update(
                Text(f"recorded on {device}: no GPU in this record (saved record, nothing live)", style="dim")
            )
        self.query_one("#runner", Static).update(
            Text("saved record: no live counters; each phase's peak is in the Gates pane", style="dim")
        )
        self.query_one("#history", Sparkline).data = peaks
        self.query_one("#history-label", Label).update("History: peak memory of each phase (MiB)")
