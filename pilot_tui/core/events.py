"""Messages between the runner process and its views: events out, commands in.

One JSON object per line over a pipe. Everything here is plain data so that the UI side can read
it without importing torch, and a recorded stream can be replayed into the TUI in tests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, ClassVar


def json_safe(value: Any) -> Any:
    """`value` with every NaN/inf as `{"__float__": "nan"}`: JSON has none; `json_restored` undoes it.
    Also what the ranks of a torchrun group send each other through the store."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return json_safe(_plain(value))
    return value


def _plain(value: Any) -> Any:
    """json's fallback for what it cannot encode: a dataclass nested in a message, as its fields."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_restored(value: Any) -> Any:
    """The NaN/inf that `json_safe` spelled out, as floats again."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: json_restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_restored(v) for v in value]
    return value


@dataclass(frozen=True)
class WireMessage:
    """Base of every event and command; `kind` tags it on the wire."""

    kind: ClassVar[str] = ""

    def to_json(self) -> str:
        # One pass of json's C encoder; only a message holding a NaN or inf (a failed row's loss,
        # say) is walked in Python to spell them out. `asdict` + `json_safe` on every message
        # deep-copied it twice: ~0.25 ms for a steady row, twice a phase.
        body = {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}
        try:
            return json.dumps(body, allow_nan=False, default=_plain)
        except ValueError:
            return json.dumps(json_safe(body), allow_nan=False, default=_plain)


# ------------------------------------------------------------------ events (runner -> views)


@dataclass(frozen=True)
class RunnerReady(WireMessage):
    """The task loaded and the data is usable; carries the environment and dataset facts."""

    kind: ClassVar[str] = "ready"
    pid: int
    environment: dict[str, Any]
    dataset: dict[str, Any]


@dataclass(frozen=True)
class Opening(WireMessage):
    """What the runner is doing while it opens the campaign (importing torch, running the script
    up to its `train()`…): a view says it beside the time waited, so no wait is a silent one."""

    kind: ClassVar[str] = "opening"
    stage: str


@dataclass(frozen=True)
class BadInput(WireMessage):
    """The campaign cannot run as declared (task file, factory, empty data): exit code 2."""

    kind: ClassVar[str] = "bad_input"
    message: str


@dataclass(frozen=True)
class PhaseStarted(WireMessage):
    """A phase began with these input parameters."""

    kind: ClassVar[str] = "phase_started"
    step: str
    phase: str
    variant: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PhaseProgress(WireMessage):
    """Work done inside a long phase; `loss` is the latest finite training loss, if any."""

    kind: ClassVar[str] = "phase_progress"
    step: str
    done: int
    total: int
    loss: float | None = None
    message: str = ""


@dataclass(frozen=True)
class PhaseFinished(WireMessage):
    """A phase ended; `row` is exactly what the record keeps for it."""

    kind: ClassVar[str] = "phase_finished"
    step: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Counters(WireMessage):
    """A sample of the runner's own memory counters (allocator on CUDA, process RSS on CPU)."""

    kind: ClassVar[str] = "counters"
    time: float
    device: str
    values: dict[str, float]


@dataclass(frozen=True)
class RecordUpdate(WireMessage):
    """Extra record content a phase produced beside its row (e.g. `variants`, `runs`, `artifacts`)."""

    kind: ClassVar[str] = "record_update"
    section: str
    value: Any


@dataclass(frozen=True)
class RunUpdate(WireMessage):
    """Live point of an LR run for the board: a training loss, and a validation loss when taken."""

    kind: ClassVar[str] = "run_update"
    run_id: str
    update: int
    loss: float
    validation: float | None = None
    status: str = "running"


@dataclass(frozen=True)
class RunnerError(WireMessage):
    """A command failed outside any phase (a bug or an unknown command); the runner goes on."""

    kind: ClassVar[str] = "runner_error"
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class Idle(WireMessage):
    """The runner finished a command and waits for the next."""

    kind: ClassVar[str] = "idle"


# ------------------------------------------------------------------ commands (views -> runner)


@dataclass(frozen=True)
class OpenCampaign(WireMessage):
    """Load the task of this campaign file and report RunnerReady or BadInput."""

    kind: ClassVar[str] = "open"
    spec_path: str
    work_dir: str
    # The record's rows so far, when a new runner takes over a campaign (a restart, `continue`):
    # later phases read earlier ones (e.g. `final` finds the export's files).
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class RunStep(WireMessage):
    """Run one step of the campaign's plan; `overrides` change its inputs (a new variant)."""

    kind: ClassVar[str] = "run"
    step: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Cancel(WireMessage):
    """Stop the running phase at the next safe point; it ends with verdict fail, reason cancelled."""

    kind: ClassVar[str] = "cancel"


@dataclass(frozen=True)
class Shutdown(WireMessage):
    """Exit the runner process."""

    kind: ClassVar[str] = "shutdown"


_TYPES: dict[str, type[WireMessage]] = {
    cls.kind: cls
    for cls in (
        RunnerReady,
        BadInput,
        PhaseStarted,
        PhaseProgress,
        PhaseFinished,
        Counters,
        RecordUpdate,
        RunUpdate,
        RunnerError,
        Idle,
        OpenCampaign,
        Opening,
        RunStep,
        Cancel,
        Shutdown,
    )
}


def decode(line: str) -> WireMessage:
    """Parse one wire line back into its message class."""
    data = json_restored(json.loads(line))
    cls = _TYPES[data.pop("kind")]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
