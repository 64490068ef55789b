"""`first_step`: the first optimizer update, which allocates the optimizer state (R5), and the
checks made on it: the same update cut into other microbatches (R9, R26), the task's own loss
against a reference, every trainable parameter reached by a gradient."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("first_step")
def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.as_variant(ctx, run, lambda: ctx.training.first_update(ctx, run))
