"""`resume`: train k updates, save, resume in a new process for n more; the n updates must be the
ones the uninterrupted run took (R15), where resumes really break too (R26)."""

from __future__ import annotations

from ...core.steps import Step
from ..context import RunContext
from .base import Outcome, PhaseRun, before_step, phase
from .estimate import estimate_forked

# Steps the resume's new process may prepare beside (a captured trainer's script run up to its
# train()): the LR board's runs, which are never timed; and the estimate while it waits for its
# fork (the runner's own core is idle then, and the estimate's figures are no timings).
AHEAD_BESIDE = frozenset({"lr_run"})


@before_step
def resume_process_ahead(ctx: RunContext, step: Step) -> None:
    if ctx.training is None or step.phase == "resume":
        return
    if step.phase in AHEAD_BESIDE or (step.phase == "estimate" and estimate_forked(ctx)):
        ctx.training.resume_ahead(ctx, step)
    else:
        ctx.training.resume_settled(ctx, step)


@phase("resume")
def resume(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.resume(ctx, run)
