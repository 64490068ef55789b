"""`save`: the training's own full checkpoint — weights, optimizer, schedule, scaler, RNG, data
position — written as the real run writes it and read back with the safe rules (R15, R17)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("save")
def save(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.save(ctx, run)
