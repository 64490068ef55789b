"""The training under test: everything a gate asks of whoever owns the training.

A gate (`runner/phases/`) is written once, against `Training`. Two implementations answer it: the
pilot's own loop over a task (`subject/task/`: a task file, a built-in task, a Hugging Face model
and its data) and a trainer captured from the user's script (`subject/trainer/`). Where the two
genuinely differ — the pilot's update against the trainer's own `train()`, the pilot's checkpoint
against `_save_checkpoint` — the difference lives in these methods, never in a second body of the
phase; what a gate judges the same way on every training (the weights after load, the examples as
the loss sees them, the checks registered on a phase) lives in the body.

Each method takes the `RunContext` and the `PhaseRun` of the step it serves: the spec, the splits,
progress, cancel and memo are the context's; the step's variant and overrides are the run's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ...analysis.checks import Check
from ...tasks.contract import Task

if TYPE_CHECKING:  # the context holds a Training: typed here, imported there
    from ...core.spec import FitSearchSpec
    from ...core.steps import Step
    from ..checks.inspection import ModelOutput
    from ..context import Outcome, PhaseRun, RunContext
    from ..memory.estimate.fake_run import ModelSource


@dataclass
class Loaded:
    """What `load` built, as the training holds it: the module trained, and what its owner adds."""

    model: torch.nn.Module
    details: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    # The load's duration when it ran before the phase (a captured script, up to its train()).
    duration_s: float | None = None
    # Completes "non-finite weights …": where the weights came from.
    built: str = "after load in"


@dataclass
class InspectionInput:
    """The examples as the loss sees them, for the shared scan (`checks/inspection`)."""

    task: Task
    max_length: int
    declared_names: list[str]
    microbatch: int
    splits: dict[str, list[int]]
    output: ModelOutput
    # Filled by the scan with what the model sees per example, hashed (the split check reuses it).
    digests: list[tuple[str, str]] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoopView:
    """The batches the training's own loop gets, beside the scan of single examples."""

    checks: list[Check] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


class Training(ABC):
    """The training under test. `task` shows its examples to the data checks."""

    task: Task
    # Phases this training keeps in the runner's own process under [distributed], rather than on
    # the ranks (a captured trainer's resume: process C captures the script alone).
    one_process: tuple[str, ...] = ()
    # Whether the LR board's runs may train in forks of the runner beside untimed work
    # (`phases/lr_run_beside.py`): each run built fresh from the configuration, in this process.
    board_runs_beside = False
    # What the variant comparison says where it finds no training state of the pilot's to break
    # down into weights, gradients and optimizer state.
    breakdown_note = "no training state left to measure (the variant failed before building one)"

    # ------------------------------------------------------------------ data

    def splits(self, ctx: RunContext) -> dict[str, list[int]] | None:
        """The training's own train / validation / test indices, or None for the spec's split."""
        return None

    @abstractmethod
    def inspection(self, ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
        """What the shared scan of `inspect` reads: the task, the length, the model's output size."""

    def loop_view(self, ctx: RunContext, show: int) -> LoopView | None:
        """The batches the training's loop really gets (None where the scan's batches are those)."""
        return None

    def after_inspection(self, ctx: RunContext, seen: InspectionInput) -> None:
        """What the scan found that later phases reuse (what the model sees, hashed)."""
        return None

    @abstractmethod
    def split_check(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """No example (or group) in two splits, on the splits this training really uses."""

    # ------------------------------------------------------------------ engine

    @abstractmethod
    def model(self, ctx: RunContext, variant: str) -> torch.nn.Module | None:
        """The module the variant trains, as it stands now (None before it is built): what a
        check registered on a phase reads, on every training alike."""

    @abstractmethod
    def load(self, ctx: RunContext, run: PhaseRun) -> Loaded:
        """The weights as the run starts from them."""

    def packing_isolation(self, ctx: RunContext, variant: str) -> dict[str, Any] | None:
        """Whether the documents its collator packs into one row see each other
        (checks/packing.py); None where nothing is packed or this training cannot say."""
        return None

    def numerics_probe(self, ctx: RunContext, variant: str) -> Any:
        """One batch, the module and its loss for the numerics A/B (checks/numerics.py: Probe);
        None where this training offers none."""
        return None

    @abstractmethod
    def optimizer(self, ctx: RunContext, variant: str) -> Any:
        """The optimizer stepping the variant's model, as the last update left it (None before
        its first update): its state and parameter groups, for checks on the update."""

    @abstractmethod
    def overfit(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """A tiny subset learnt through this training's own update, the training left as found."""

    @abstractmethod
    def first_update(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """The first optimizer update (it allocates the optimizer state) and the checks before it."""

    @abstractmethod
    def steady(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """Updates timed until their mean is known to the declared precision."""

    @abstractmethod
    def eval_longest(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """An evaluation on the longest rows, where evaluation peaks."""

    @abstractmethod
    def save(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """The training's own full checkpoint, read back."""

    @abstractmethod
    def export(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """The artifact meant for inference, and the outputs `final` must get again from it."""

    @abstractmethod
    def final(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """The export reloaded in a new process: its outputs against the ones before the save."""

    @abstractmethod
    def resume(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        """Train k, save, resume in a new process for n: the same updates as without the stop."""

    def resume_ahead(self, ctx: RunContext, step: Step) -> None:
        """Before an untimed step (an LR run): start what the resume's new process can do before
        run A exists, beside it. Nothing here; a captured trainer runs its script there."""
        return

    def resume_settled(self, ctx: RunContext, step: Step) -> None:
        """Before any other step: whatever `resume_ahead` started has stopped using the CPU."""
        return

    def final_ahead(self, ctx: RunContext, step: Step) -> None:
        """Before an LR run: start `final`'s new process beside it, once the export exists.
        Nothing here; a captured trainer starts its reload there."""
        return

    def final_settled(self, ctx: RunContext, step: Step) -> None:
        """Before any other step: whatever `final_ahead` started has ended."""
        return

    @abstractmethod
    def lr_run(self, ctx: RunContext, run: PhaseRun, plan: Any, row: dict[str, Any], live: Any) -> None:
        """One run of the LR board, filling its `[[runs]]` row as it goes (a failure keeps what was
        measured): `plan` is decided and the row opened and closed by the shared body."""

    @abstractmethod
    def fit_lengths(self, ctx: RunContext, run: PhaseRun, spec: FitSearchSpec) -> list[int]:
        """The max lengths the fit search may try (a captured trainer's rows are cut already)."""

    @abstractmethod
    def fit_points(self, ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
        """A function measuring one fit-search point (microbatch, max length)."""

    @abstractmethod
    def estimate_source(self, ctx: RunContext) -> ModelSource:
        """The model and batches the fake-tensor estimate rebuilds."""

    # ------------------------------------------------------------------ variants

    def as_variant(self, ctx: RunContext, run: PhaseRun, measure: Callable[[], Outcome]) -> Outcome:
        """A variant's phase (`first_step@V`, …) measured with the variant's settings in force.

        The pilot's loop builds the variant's own state from its configuration (`ctx.config`):
        nothing to set around it. A captured trainer sets the variant's batch on `trainer.args`,
        or runs the phase in a fresh capture of the script with the variant's args."""
        return measure()
