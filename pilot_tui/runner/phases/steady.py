"""`steady`: updates timed until their mean is known to the declared precision, or the timing
budget ends (`timing/steady.py`): the step time every plan is built from."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("steady")
def steady(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.as_variant(ctx, run, lambda: ctx.training.steady(ctx, run))
