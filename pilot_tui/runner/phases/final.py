"""`final`: the export reloaded in a new process, its outputs against the ones before the save (R16, R17)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("final")
def final(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.final(ctx, run)
