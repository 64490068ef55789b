"""`resume`: train k updates, save, resume in a new process for n more; the n updates must be the
ones the uninterrupted run took (R15), where resumes really break too (R26)."""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("resume")
def resume(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.resume(ctx, run)
