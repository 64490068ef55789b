"""`overfit`: can the training learn a tiny subset? A mechanics check, not a generalisation claim (R3)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("overfit")
def overfit(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.overfit(ctx, run)
