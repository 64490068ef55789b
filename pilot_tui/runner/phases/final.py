"""`final`: the export reloaded in a new process, its outputs against the ones before the save (R16, R17)."""

from __future__ import annotations

from ...core.steps import Step
from ..context import RunContext
from .base import Outcome, PhaseRun, before_step, phase


@before_step
def final_process_ahead(ctx: RunContext, step: Step) -> None:
    """The final check's new process may start beside the LR board's runs, never timed; any other
    step but `final` waits for it to end first."""
    if ctx.training is None or step.phase == "final":
        return
    if step.phase == "lr_run":
        ctx.training.final_ahead(ctx, step)
    else:
        ctx.training.final_settled(ctx, step)


@phase("final")
def final(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.final(ctx, run)
