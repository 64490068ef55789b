"""The pilot's own loop over a task: a task file, a built-in task, a Hugging Face model and its data.

`TaskTraining` answers the gates' questions (`subject/base.py: Training`) with the pilot's own
machinery (`runner/loop/`: the training state, its update, the data order, the checkpoint): one
module per concern here — `data_gates` (what inspect scans, split), `tiny_subset` (overfit),
`updates` (the first update and steady), `eval_longest`, `artifacts` (save, export), `final`,
`resume`, `board` (one LR run), `fit` (one fit-search point).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ....core.spec import FitSearchSpec
from ...checks import packing
from ...checks.numerics import Probe
from ...context import Outcome, PhaseRun, RunContext
from ...loop.training import collate
from ...memory.estimate.campaign import task_campaign_source
from ...memory.estimate.fake_run import ModelSource
from ..base import InspectionInput, Loaded, Training
from . import artifacts, board, data_gates, eval_longest, final, fit, numerics, resume, tiny_subset, updates


class TaskTraining(Training):
    """The pilot's own loop: the campaign's task, trained by `runner/loop/` under the spec."""

    board_runs_beside = True

    def inspection(self, ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
        return data_gates.inspection(ctx, run, show)

    def after_inspection(self, ctx: RunContext, seen: InspectionInput) -> None:
        data_gates.after_inspection(ctx, seen)

    def split_check(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return data_gates.split_check(ctx, run)

    def load(self, ctx: RunContext, run: PhaseRun) -> Loaded:
        variant = run.step.variant
        ctx.states.pop(variant, None)  # a load always starts from fresh weights
        state = ctx.state(variant, ctx.config(variant, run.overrides))
        return Loaded(state.model, {"task_notes": list(ctx.task.notes)})

    def model(self, ctx: RunContext, variant: str) -> torch.nn.Module | None:
        state = ctx.states.get(variant)
        return state.model if state is not None else None

    def optimizer(self, ctx: RunContext, variant: str) -> Any:
        state = ctx.states.get(variant)
        return state.optimizer if state is not None else None

    def packing_isolation(self, ctx: RunContext, variant: str) -> dict[str, Any] | None:
        state = ctx.states.get(variant)
        if state is None:
            return None
        cfg = state.config
        # Enough rows for the collator to pack at least two documents together.
        chosen = ctx.splits["train"][: max(cfg.microbatch, 4)]
        rows = [ctx.task.examples[i] for i in chosen]

        def batch(examples: list[Any]) -> dict[str, torch.Tensor]:
            return collate(ctx.task, examples, cfg.max_length, ctx.device)

        return packing.isolation(ctx.task, state.model, rows, batch, ctx.device)

    def numerics_probe(self, ctx: RunContext, variant: str) -> Probe | None:
        state = ctx.states.get(variant)
        if state is None:
            return None
        return numerics.task_probe(ctx, state)

    def overfit(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return tiny_subset.overfit(ctx, run)

    def first_update(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return updates.first_update(ctx, run)

    def steady(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return updates.steady(ctx, run)

    def eval_longest(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return eval_longest.eval_longest(ctx, run)

    def save(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return artifacts.save(ctx, run)

    def export(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return artifacts.export(ctx, run)

    def final(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return final.final(ctx, run)

    def resume(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        return resume.resume(ctx, run)

    def lr_run(self, ctx: RunContext, run: PhaseRun, plan: Any, row: dict[str, Any], live: Any) -> None:
        state = board.train(ctx, run, plan, row, live)
        board.keep_predictions(ctx, state, row, plan.run_id)

    def fit_lengths(self, ctx: RunContext, run: PhaseRun, spec: FitSearchSpec) -> list[int]:
        return fit.lengths(ctx, spec)

    def fit_points(self, ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
        return fit.points(ctx, run)

    def estimate_source(self, ctx: RunContext) -> ModelSource:
        return task_campaign_source(ctx)
