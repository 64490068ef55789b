"""`export`: the artifact meant for inference, and the outputs `final` must get again from it (R16)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("export")
def export(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.export(ctx, run)
