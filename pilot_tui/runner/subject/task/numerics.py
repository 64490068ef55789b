"""The numerics A/B's probe for the pilot's own loop: the variant's model, its first microbatch of
training rows, and the task's own loss under the configuration's autocast (and without it)."""

from __future__ import annotations

import torch

from ...checks import objective
from ...checks.numerics import Batch, Probe
from ...context import RunContext
from ...loop.training import TrainState, autocast, collate


def task_probe(ctx: RunContext, state: TrainState) -> Probe:
    cfg = state.config
    rows = [ctx.task.examples[i] for i in ctx.splits["train"][: cfg.microbatch]]
    batch = collate(ctx.task, rows, cfg.max_length, ctx.device)
    count = max(1, objective.supervised_count(ctx.task, batch))

    def plain(model: torch.nn.Module, b: Batch) -> torch.Tensor:
        return objective.loss_sum(ctx.task, objective.forward(ctx.task, model, b), b) / count

    def run(model: torch.nn.Module, b: Batch) -> torch.Tensor:
        with autocast(ctx.device, cfg.precision):
            logits = objective.forward(ctx.task, model, b)
            return objective.loss_sum(ctx.task, logits, b).float() / count

    return Probe(state.model, batch, run, plain, cfg.precision)
