"""`TrainerTraining`: a trainer captured from the user's script, answering every gate.

Each gate runs on the trainer's own parts — its collator, `training_step`, `train()`,
`evaluate()`, `_save_checkpoint`, `save_model`, its resume path — in the modules beside this one:
`data_gates` (load, inspect, split, overfit), `engine_gates` (first_step, eval_longest, save,
export, final), `steady_gate`, `resume_gate`, `board` (one LR run), `fit_gate` (one fit point).
A memory variant sets its batch on `trainer.args` in place; one that changes the script's args or
environment runs in a fresh capture (`fresh_variant`). What the pilot changes: docs/trainer.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ....core.spec import FitSearchSpec
from ....core.steps import Step
from ...context import Outcome, PhaseRun, RunContext
from ...memory.estimate.fake_run import ModelSource
from ..base import InspectionInput, Loaded, LoopView, Training
from . import (
    board,
    data_gates,
    engine_gates,
    fit_gate,
    fresh_variant,
    loop,
    numerics,
    reload_process,
    resume_gate,
    steady_gate,
)
from .adapter import TrainerAdapter


class TrainerTraining(Training):
    """The captured trainer behind its adapter (its rows shown to the data checks as a task)."""

    # Under [distributed] the resume's process C captures the script alone, not as N ranks.
    one_process = ("resume",)
    breakdown_note = (
        "a captured trainer's memory is not broken down yet (weights, gradients, optimizer state)"
    )

    def __init__(self, adapter: TrainerAdapter) -> None:
        self.adapter = adapter
        self.task = adapter.task

    def splits(self, ctx: RunContext) -> dict[str, list[int]]:
        return self.adapter.splits()  # the script's own train and eval datasets

    def inspection(self, ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
        return data_gates.inspection(ctx, run, show)

    def loop_view(self, ctx: RunContext, show: int) -> LoopView:
        return data_gates.loop_view(ctx, show)

    def split_check(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return data_gates.split_check(ctx, run)

    def load(self, ctx: RunContext, run: PhaseRun) -> Loaded:
        return data_gates.load(ctx, run)

    def model(self, ctx: RunContext, variant: str) -> torch.nn.Module | None:
        return loop.unwrapped(self.adapter.trainer)  # a variant runs on the same trainer

    def optimizer(self, ctx: RunContext, variant: str) -> Any:
        return self.adapter.trainer.optimizer  # the trainer's own (None until its first train())

    def numerics_probe(self, ctx: RunContext, variant: str) -> Any:
        return numerics.trainer_probe(self.adapter)

    def overfit(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return data_gates.overfit(ctx, run)

    def first_update(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return engine_gates.first_step(ctx, run)

    def steady(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return steady_gate.steady(ctx, run)

    def eval_longest(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return engine_gates.eval_longest(ctx, run)

    def save(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return engine_gates.save(ctx, run)

    def export(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return engine_gates.export(ctx, run)

    def final(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return engine_gates.final(ctx, run)

    def resume(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return resume_gate.resume(ctx, run)

    def resume_ahead(self, ctx: RunContext, step: Step) -> None:
        resume_gate.start_ahead(ctx, step)

    def resume_settled(self, ctx: RunContext, step: Step) -> None:
        resume_gate.settle_ahead(ctx, step)

    def final_ahead(self, ctx: RunContext, step: Step) -> None:
        reload_process.start_ahead(ctx, step)

    def final_settled(self, ctx: RunContext, step: Step) -> None:
        reload_process.settle_ahead(ctx, step)

    def lr_run(self, ctx: RunContext, run: PhaseRun, plan: Any, row: dict[str, Any], live: Any) -> None:
        board.lr_run(ctx, run, plan, row, live)

    def fit_lengths(self, ctx: RunContext, run: PhaseRun, spec: FitSearchSpec) -> list[int]:
        return fit_gate.lengths(ctx, spec)

    def fit_points(self, ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
        return fit_gate.points(ctx, run)

    def estimate_source(self, ctx: RunContext) -> ModelSource:
        return self.adapter.estimate_source()

    def as_variant(self, ctx: RunContext, run: PhaseRun, measure: Callable[[], Outcome]) -> Outcome:
        """The variant's batch set on `trainer.args` (put back after); a variant that changes the
        script's args or env runs in a fresh capture (fresh_variant.py)."""
        if fresh_variant.runs_fresh(ctx, run.step.variant):
            return fresh_variant.fresh_phase(ctx, run)
        cfg = ctx.config(run.step.variant, run.overrides)
        with loop.batch_settings(
            self.adapter.trainer, cfg.microbatch, cfg.accumulation, cfg.activation_checkpointing
        ):
            return measure()
