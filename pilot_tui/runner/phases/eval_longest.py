"""`eval_longest`: evaluation on the *longest* validation rows, often the highest peak (R5)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("eval_longest")
def eval_longest(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.as_variant(ctx, run, lambda: ctx.training.eval_longest(ctx, run))
