"""Typed views of what the record holds: phase rows, their memory, and step keys (pure, no torch).

Rows travel as plain dicts (JSON on the wire, TOML in the record) so that every record written so
far stays readable; everything that *reads* a row goes through this module, so each figure is
decided in one place: which counter is "the peak", how a step key splits, how a step is labelled.
`from_toml` is tolerant: a missing or mistyped field reads as absent, never as a made-up value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .verdict import CANCELLED, PASS, Verdict

CONTROL = "control"


def number(value: Any) -> float | None:
    """A finite int/float from a record field, else None (bools and strings are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def num(value: Any, default: float = 0.0) -> float:
    """`number(value)`, or `default` when the field is absent or not a finite number."""
    found = number(value)
    return default if found is None else found


# ------------------------------------------------------------------------------------ step keys


@dataclass(frozen=True)
class StepKey:
    """One phase for one variant (or LR run): `phase` for the control, `phase@variant` otherwise."""

    phase: str
    variant: str = CONTROL

    @classmethod
    def parse(cls, key: str) -> StepKey:
        """`steady@bf16` -> (steady, bf16); `steady` -> (steady, control); a `#n` suffix is dropped."""
        key = key.split("#", 1)[0]
        phase, _, variant = key.partition("@")
        return cls(phase, variant or CONTROL)

    @property
    def key(self) -> str:
        return self.phase if self.variant == CONTROL else f"{self.phase}@{self.variant}"

    @property
    def label(self) -> str:
        """How a person reads it: `steady` or `steady [bf16]`."""
        return self.phase if self.variant == CONTROL else f"{self.phase} [{self.variant}]"

    def __str__(self) -> str:
        return self.key


# ------------------------------------------------------------------------------------ memory

# The counters a row's memory can hold; allocated and reserved are never added (R6).
CUDA_PEAKS = ("peak_allocated_mb", "peak_reserved_mb")
CPU_PEAKS = ("peak_rss_mb",)
PEAK_KEYS = (*CUDA_PEAKS, *CPU_PEAKS)
BASIS_CUDA = "peak reserved (CUDA caching allocator)"
BASIS_CPU = "peak RSS (whole CPU process)"


@dataclass(frozen=True)
class Memory:
    """A phase's memory counters in MiB, as measured; absent counters are None."""

    peak_allocated_mb: float | None = None
    peak_reserved_mb: float | None = None
    peak_rss_mb: float | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_toml(cls, data: Any) -> Memory:
        data = data if isinstance(data, Mapping) else {}
        return cls(
            peak_allocated_mb=number(data.get("peak_allocated_mb")),
            peak_reserved_mb=number(data.get("peak_reserved_mb")),
            peak_rss_mb=number(data.get("peak_rss_mb")),
            values=dict(data),
        )

    @property
    def on_cuda(self) -> bool:
        return self.peak_reserved_mb is not None or self.peak_allocated_mb is not None

    @property
    def measured(self) -> bool:
        return self.on_cuda or self.peak_rss_mb is not None

    def peak(self) -> float | None:
        """The one figure a ceiling, a plan and a table compare: peak reserved on CUDA (what the
        caching allocator holds), peak RSS on CPU (the whole process). Never a sum."""
        if self.peak_reserved_mb is not None:
            return self.peak_reserved_mb
        if self.on_cuda:
            return self.peak_allocated_mb
        return self.peak_rss_mb

    @property
    def basis(self) -> str:
        """What `peak()` is, in words."""
        return BASIS_CUDA if self.on_cuda else BASIS_CPU

    @property
    def peak_name(self) -> str:
        """The record key `peak()` reads."""
        if self.peak_reserved_mb is not None:
            return "peak_reserved_mb"
        return "peak_allocated_mb" if self.on_cuda else "peak_rss_mb"

    def summary(self) -> str:
        """One short phrase for a line of text: both CUDA peaks side by side, or the RSS peak."""
        if self.on_cuda:
            alloc = "—" if self.peak_allocated_mb is None else f"{self.peak_allocated_mb:.0f}"
            res = "—" if self.peak_reserved_mb is None else f"{self.peak_reserved_mb:.0f}"
            return f"peak alloc {alloc} MiB · peak reserved {res} MiB"
        if self.peak_rss_mb is not None:
            return f"peak RSS {self.peak_rss_mb:.0f} MiB"
        return "no memory reading"

    def compact(self) -> str:
        """`summary()` in few characters, for a line of 80 columns: `alloc A/res R MiB` or `RSS X MiB`."""
        if self.on_cuda:
            return f"alloc {self.peak_allocated_mb or 0:.0f}/res {self.peak_reserved_mb or 0:.0f} MiB"
        if self.peak_rss_mb is not None:
            return f"RSS {self.peak_rss_mb:.0f} MiB"
        return "no memory"

    def peaks(self) -> dict[str, float]:
        """Every peak counter present, by record key."""
        return {k: v for k in PEAK_KEYS if (v := getattr(self, k)) is not None}


def peak_counter(device_kind: str) -> str:
    """The record key of the peak a ceiling compares on this kind of device."""
    return "peak_reserved_mb" if device_kind == "cuda" else "peak_rss_mb"


# ------------------------------------------------------------------------------------ phase rows


@dataclass(frozen=True)
class PhaseRow:
    """One `[[phases]]` row: what ran, with which inputs, what it measured, and the verdict."""

    name: str
    step: StepKey
    verdict: Verdict
    reason: str = ""
    started: str = ""
    duration_s: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    memory: Memory = field(default_factory=Memory)
    details: Mapping[str, Any] = field(default_factory=dict)
    # One entry per rank of a phase run under torchrun (R22); empty on one process.
    ranks: tuple[RankRow, ...] = ()
    # Stopped before it ended (a cancel, SIGTERM, a hang-up): interrupted, not judged.
    cancelled: bool = False
    # The step key exactly as recorded (a re-run under its own key keeps its `#n`).
    recorded_key: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_toml(cls, data: Any) -> PhaseRow | None:
        """A row from a record (any schema so far); None when it names no phase at all."""
        if not isinstance(data, Mapping):
            return None
        key = data.get("step")
        name = data.get("name")
        if not isinstance(key, str) or not key:
            if not isinstance(name, str) or not name:
                return None
            variant = data.get("variant")
            key = StepKey(name, variant if isinstance(variant, str) and variant else CONTROL).key
        step = StepKey.parse(key)
        variant = data.get("variant")
        if isinstance(variant, str) and variant and variant != step.variant:
            step = StepKey(step.phase, variant)
        params, details, ranks = data.get("params"), data.get("details"), data.get("ranks")
        reason = str(data.get("reason") or "")
        return cls(
            name=name if isinstance(name, str) and name else step.phase,
            step=step,
            verdict=Verdict.read(data.get("verdict")),
            reason=reason,
            started=str(data.get("started") or ""),
            duration_s=number(data.get("duration_s")),
            params=dict(params) if isinstance(params, Mapping) else {},
            memory=Memory.from_toml(data.get("memory")),
            details=dict(details) if isinstance(details, Mapping) else {},
            ranks=tuple(RankRow.from_toml(r) for r in ranks if isinstance(r, Mapping))
            if isinstance(ranks, list)
            else (),
            # Rows written before the flag existed said it in the reason only.
            cancelled=data.get(CANCELLED) is True or reason.startswith(CANCELLED),
            recorded_key=key,
            raw=data,
        )

    @property
    def key(self) -> str:
        return self.step.key

    @property
    def variant(self) -> str:
        return self.step.variant

    @property
    def label(self) -> str:
        return self.step.label

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def param(self, name: str, default: float = 0.0) -> float:
        return num(self.params.get(name), default)

    def detail(self, name: str, default: float = 0.0) -> float:
        return num(self.details.get(name), default)


# A pass row's reason when its body said nothing else (key_figures shows what it measured instead).
ALL_PASSED = "all checks passed"


def phase_row(
    *,
    name: str,
    step: str,
    variant: str,
    verdict: Verdict,
    reason: str,
    params: Mapping[str, Any],
    memory: Mapping[str, Any],
    details: Mapping[str, Any],
    started: str = "",
    duration_s: float = 0.0,
    ranks: Sequence[Mapping[str, Any]] | None = None,
    cancelled: bool = False,
) -> dict[str, Any]:
    """A `[[phases]]` row as the wire and the record hold it: the one place a row is built.

    The runner's own rows, the merged row of a phase run on several ranks and the row the session
    writes for a runner that died all come from here, so every row has the same keys in the same
    order; `PhaseRow.from_toml` reads it back.
    """
    row: dict[str, Any] = {
        "name": name,
        "step": step,
        "variant": variant,
        "verdict": Verdict(verdict).value,
        "reason": reason or (ALL_PASSED if verdict == PASS else ""),
    }
    if started:
        row["started"] = started
    row |= {
        "duration_s": round(duration_s, 4),
        "params": dict(params),
        "memory": dict(memory),
        "details": dict(details),
    }
    if ranks is not None:
        row["ranks"] = [dict(r) for r in ranks]
    if cancelled:
        row[CANCELLED] = True
    return row


@dataclass(frozen=True)
class RankRow:
    """One rank's figures in a phase row run on several ranks (what the Gates and Counters draw)."""

    rank: int | None
    verdict: Verdict
    reason: str = ""
    duration_s: float | None = None
    memory: Memory = field(default_factory=Memory)
    nvml_used_mb: float | None = None
    step_time_s: float | None = None
    data_wait_share: float | None = None
    state_mb: float | None = None
    # Several nodes: the node the rank ran on, and its host name (absent on one machine).
    node: int | None = None
    host: str = ""

    @classmethod
    def from_toml(cls, data: Mapping[str, Any]) -> RankRow:
        rank, node = data.get("rank"), data.get("node")
        return cls(
            rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
            verdict=Verdict.read(data.get("verdict")),
            reason=str(data.get("reason") or ""),
            duration_s=number(data.get("duration_s")),
            memory=Memory.from_toml(data),  # a rank entry holds its peaks at its top level
            nvml_used_mb=number(data.get("nvml_used_mb")),
            step_time_s=number(data.get("step_time_s")),
            data_wait_share=number(data.get("data_wait_share")),
            state_mb=number(data.get("state_mb")),
            node=node if isinstance(node, int) and not isinstance(node, bool) else None,
            host=str(data.get("host") or ""),
        )


def read_rows(phases: Any) -> list[PhaseRow]:
    """Every readable row of a record's `[[phases]]`, in order (unreadable entries are skipped)."""
    if not isinstance(phases, list):
        return []
    return [row for item in phases if (row := PhaseRow.from_toml(item)) is not None]


def newest_by_key(rows: Iterable[PhaseRow]) -> dict[str, PhaseRow]:
    """The newest row of each step key: a retry is a new row, and the newest one is the measurement."""
    out: dict[str, PhaseRow] = {}
    for row in rows:
        out[row.key] = row
    return out


# ------------------------------------------------------------------------------------ LR runs


@dataclass(frozen=True)
class RunRow:
    """One `[[runs]]` row: an attempt of an LR run, never replaced (R14) — or the points a live
    run has sent so far, before its row arrives (then only `id`, `status` and the curves)."""

    id: str
    status: str = ""
    lr: float | None = None
    seed: int | None = None
    stop_cause: str = ""
    stop_step: int | None = None
    retry_of: str = ""
    reason: str = ""
    final_validation: float | None = None
    best_validation: float | None = None
    # Held by reference, never copied: a live run's curve grows in place, point by point.
    losses: Sequence[Any] = ()
    loss_updates: Sequence[Any] | None = None
    validation: Sequence[Any] = ()
    # Bumped by the view at every live point (the Board re-plots when it changes).
    version: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_toml(cls, data: Any) -> RunRow | None:
        """A run from a record or a live update; None when it is not a table at all."""
        if isinstance(data, RunRow):
            return data
        if not isinstance(data, Mapping):
            return None
        seed, stop_step, version = data.get("seed"), data.get("stop_step"), data.get("version")
        losses, updates, validation = data.get("losses"), data.get("loss_updates"), data.get("validation")
        return cls(
            id=str(data.get("id", "")),
            status=str(data.get("status") or ""),
            lr=number(data.get("lr")),
            seed=_whole(seed),
            stop_cause=str(data.get("stop_cause") or ""),
            stop_step=_whole(stop_step),
            retry_of=str(data.get("retry_of") or ""),
            reason=str(data.get("reason") or ""),
            final_validation=number(data.get("final_validation")),
            best_validation=number(data.get("best_validation")),
            losses=losses if isinstance(losses, list) else (),
            loss_updates=updates if isinstance(updates, list) else None,
            validation=validation if isinstance(validation, list) else (),
            version=_whole(version) or 0,
            raw=data,
        )

    def validation_points(self) -> list[tuple[float, float]]:
        """(update, loss) of each validation point with a finite loss (update 0 when unnamed)."""
        out = []
        for p in self.validation:
            if isinstance(p, Mapping) and (loss := number(p.get("loss"))) is not None:
                out.append((num(p.get("update")), loss))
        return out

    def metric(self, name: str) -> float | None:
        """A figure of the run by its record key (e.g. the board's comparison metric)."""
        return number(self.raw.get(name))


def _whole(value: Any) -> int | None:
    """An integer field (a seed, an update number); None when absent or not a whole number."""
    found = number(value)
    return int(found) if found is not None and found.is_integer() else None


def read_runs(runs: Any) -> list[RunRow]:
    """Every readable row of a record's `[[runs]]`, in order."""
    if not isinstance(runs, list | tuple):
        return []
    return [run for item in runs if (run := RunRow.from_toml(item)) is not None]
