"""What every phase sees — the spec, the task, the device, the splits, the training under test —
the step it runs (`PhaseRun`) and what it hands back (`Outcome`, or a `PhaseFailure`)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from ..analysis.splits import field_split, group_split
from ..analysis.variants import accumulation_for
from ..core import dimensions
from ..core.accounting import account
from ..core.events import PhaseProgress, WireMessage
from ..core.spec import LoadedSpec, VariantSpec
from ..core.steps import Step
from ..core.verdict import PASS, Verdict
from ..tasks.contract import Task
from .distributed import state as dist_state
from .loop import optimizers
from .loop.residency import park_others, unpark
from .loop.training import TrainConfig, TrainState, build_state


class PhaseFailure(Exception):
    """A gate failed inside the phase; `details` go into the row."""

    def __init__(self, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details or {}


# The memo key of the step a phase body is running (set by phases/base.py: execute).
CURRENT_STEP = "runner.current_step"
# A wait shorter than this says nothing: most model builds take a fraction of a second.
SAY_AFTER_S = 2.0


@dataclass
class Outcome:
    """What a phase body returns: its verdict, why, and what the row should show."""

    verdict: Verdict = PASS
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    # Stopped by a cancel: the row says so (`cancelled = true`) and the step runs again.
    cancelled: bool = False
    # The phase's duration when its work ran before the body (a captured trainer's load ran in the
    # script, up to its train()): the row's duration_s, read by the plan.
    duration_s: float | None = None
    # The phase's memory counters when it ran in another process (a captured trainer's fresh
    # capture): they replace this process's, which measured only the wait.
    memory: dict[str, Any] | None = None
    # Measured in another process that already ran the phase's registered checks (a fresh capture).
    checked_elsewhere: bool = False


@dataclass
class PhaseRun:
    """Handed to a phase body: the step, the overrides, and a place for the input being processed."""

    step: Step
    overrides: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    # The input shape being processed right now, so a failure can name it (R10).
    current_input: dict[str, Any] = field(default_factory=dict)


def finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


class Cancelled(Exception):
    """The user cancelled the running phase."""


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("batch.device = 'cuda' but no CUDA device is available")
    if requested == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", 0)


@dataclass
class RunContext:
    loaded: LoadedSpec
    task: Task
    device: torch.device
    emit: Callable[[WireMessage], None]
    work_dir: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    states: dict[str, TrainState] = field(default_factory=dict)
    # Things a phase leaves for later phases (e.g. replay outputs before save).
    memo: dict[str, Any] = field(default_factory=dict)
    # Every row this runner produced, in order, so later phases can compare with earlier ones.
    rows: list[dict[str, Any]] = field(default_factory=list)
    # States moved off the device while another configuration is measured (runner/loop/residency.py).
    parked: set[str] = field(default_factory=set)
    # Called while a phase waits on something that lives (a fresh process): on a rank of a
    # process group it tells the runner this rank is not hung (distributed/rank.py).
    heartbeat: Callable[[], None] = field(default=lambda: None)
    # The training under test (runner/subject/base.py: Training): the pilot's own loop over the
    # task unless the campaign hands another (a captured trainer). Typed loosely here: the subject
    # package sits above this module, which every implementation of it imports.
    training: Any = None

    def __post_init__(self) -> None:
        s = self.loaded.spec
        own = self.training.splits(self) if self.training is not None else None
        if own is not None:
            self.splits = own  # e.g. a captured script's own train and eval datasets
        elif s.split.field:
            self.splits = field_split(self.task.examples, s.split.field)
        else:
            ratios = {"train": s.split.train, "validation": s.split.validation, "test": s.split.test}
            self.splits = group_split(
                self.task.examples, self.group_key, ratios, s.split.seed, by_time=s.task.group_kind == "time"
            )
        self._last_progress = 0.0

    @property
    def spec(self):
        return self.loaded.spec

    @property
    def group_key(self) -> str:
        return self.spec.task.group_key or self.task.group_key

    @property
    def max_length(self) -> int:
        return self.spec.batch.max_length or self.task.default_max_length

    def accounting(self, microbatch: int | None = None, accumulation: int | None = None) -> dict[str, Any]:
        b = self.spec.batch
        return account(
            microbatch=microbatch or b.microbatch,
            accumulation=accumulation or b.accumulation,
            replicas=b.replicas,
            dataset_size=len(self.splits["train"]),
            hold=b.hold,
            updates=b.updates,
            epochs=b.epochs,
            drop_last=b.drop_last,
        ).as_dict()

    def variant_spec(self, variant: str) -> VariantSpec:
        if variant == "control":
            return VariantSpec(id="control")
        for v in self.spec.variants:
            if v.id == variant:
                return v
        # A variant made on the fly (the TUI's `v`): its overrides carry every change.
        return VariantSpec(id=variant)

    def config(
        self, variant: str = "control", overrides: dict[str, Any] | None = None, *, as_ranks: bool = False
    ) -> TrainConfig:
        """The control's configuration with the variant's (and the overrides') changes applied.

        Every dimension of core/dimensions.py is resolved the same way: the override, else the
        variant's value, else the control's spec field. A smaller microbatch without a declared
        accumulation raises the accumulation so the effective batch stays the control's, and the
        row says so (R11). In a distributed campaign, a phase that runs in one process (the
        runner's own, not a rank's; `as_ranks` False) folds the ranks into the accumulation: the
        same global batch, never a silently smaller one.
        """
        b, v = self.spec.batch, self.variant_spec(variant)
        ov = dict(overrides or {})
        chosen: dict[str, Any] = {}
        for d in dimensions.DIMENSIONS:
            if dimensions.is_set(d, ov.get(d.name)):
                chosen[d.name] = d.type(ov[d.name])
            elif v.get(d.name) is not None:
                chosen[d.name] = v.get(d.name)
        values = {d.name: chosen.get(d.name, self.control_value(d)) for d in dimensions.DIMENSIONS}
        microbatch = values["microbatch"]
        accumulation = chosen.get("accumulation", 0)
        notes = []
        if not accumulation:
            if microbatch != b.microbatch and (b.microbatch * b.accumulation) % microbatch == 0:
                accumulation = b.microbatch * b.accumulation // microbatch
                notes.append(
                    f"accumulation {b.accumulation} -> {accumulation} keeps the effective batch "
                    f"{b.microbatch * b.accumulation * b.replicas}"
                )
            elif microbatch != b.microbatch:
                # Not a divisor: the nearest accumulation above, and the row says the batch moved.
                accumulation, _ = accumulation_for(b.microbatch * b.accumulation, microbatch)
            else:
                accumulation = b.accumulation
        values["accumulation"] = accumulation
        if microbatch * accumulation != b.microbatch * b.accumulation:
            # Never silent: a changed effective batch is a different experiment (R11, R12).
            notes.append(
                f"effective batch {b.microbatch * b.accumulation * b.replicas} -> "
                f"{microbatch * accumulation * b.replicas}: not kept"
            )
        values["optimizer"], fallback = optimizers.runnable(values["optimizer"], self.device)
        if fallback:
            notes.append(fallback)
        acc = self.accounting(microbatch, accumulation)
        own = {f.name for f in fields(TrainConfig)}
        cfg = TrainConfig(
            variant=variant,
            replicas=b.replicas,
            seed=int(ov.get("seed", self.spec.optim.seed)),
            total_updates=int(acc["updates"]),
            notes=tuple(notes),
            extra=tuple((k, x) for k, x in values.items() if k not in own),
            **{k: x for k, x in values.items() if k in own},
        )
        if cfg.replicas > 1 and not as_ranks and not dist_state.active():
            cfg = replace(
                cfg,
                accumulation=cfg.accumulation * cfg.replicas,
                replicas=1,
                notes=(
                    *cfg.notes,
                    f"runs in one process: accumulation × {cfg.replicas} keeps the global batch of "
                    f"{cfg.replicas} ranks",
                ),
            )
        return cfg

    def control_value(self, d: dimensions.Dimension) -> Any:
        """The control's value of a dimension; an unset max length is the task's default."""
        if d.name == "max_length":
            return self.max_length
        return dimensions.control_value(self.spec, d)

    @contextlib.contextmanager
    def saying(self, what: str, after_s: float = SAY_AFTER_S) -> Iterator[None]:
        """While a long call runs inside a step (a model that takes seconds to build), the step's
        line says what it does, its seconds counted each second once `after_s` have passed."""
        step = self.memo.get(CURRENT_STEP)
        if step is None:
            yield
            return
        stop, t0 = threading.Event(), time.monotonic()

        def tick() -> None:
            while not stop.wait(1.0):
                waited = time.monotonic() - t0
                if waited >= after_s:
                    self.emit(PhaseProgress(step=step, done=0, total=1, message=f"{what} ({waited:.0f} s)"))

        ticker = threading.Thread(target=tick, daemon=True, name="saying")
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def new_state(self, config: TrainConfig) -> TrainState:
        o = self.spec.optim
        with self.saying("building the model and its optimizer"):
            return build_state(
                self.task,
                config,
                self.splits["train"],
                self.device,
                weight_decay=o.weight_decay,
                warmup=o.warmup_updates,
                schedule=o.schedule,
                drop_last=self.spec.batch.drop_last,
                data_seed=self.spec.split.seed + config.seed,
            )

    def state(self, variant: str, config: TrainConfig | None = None) -> TrainState:
        """The variant's training state, built fresh (same seed) the first time it is needed."""
        config = config or self.config(variant)
        current = self.states.get(variant)
        if current is None or current.config != config:
            self.states.pop(variant, None)
            self.parked.discard(variant)
            current = self.states[variant] = self.new_state(config)
        elif variant in self.parked:
            unpark(current, self.device)
            self.parked.discard(variant)
        return current

    def park_all(self) -> list[str]:
        """Park every training state of the runner: before a fit search or a fresh worker process."""
        return park_others(self.states, None, self.parked, self.device)

    def with_config(self, variant: str, **changes: Any) -> TrainConfig:
        return replace(self.config(variant), **changes)

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def progress(
        self, step: str, done: int, total: int, loss: float | None = None, message: str = ""
    ) -> None:
        """Throttled to ~10 events a second; the last one always goes out."""
        now = time.monotonic()
        if done < total and now - self._last_progress < 0.1:
            return
        self._last_progress = now
        self.emit(PhaseProgress(step=step, done=done, total=total, loss=loss, message=message))
