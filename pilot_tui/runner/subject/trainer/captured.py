"""What every gate on a captured trainer reads: the trainer, its adapter, the weights it was
captured with, a probe that reports progress and honours a cancel inside the trainer's loop."""

from __future__ import annotations

from typing import Any

from ...context import PhaseRun, RunContext
from . import loop
from .probe import StepProbe

INITIAL = "trainer_initial_weights"
EXPORT_MEMO = "trainer_export"


def trainer_of(ctx: RunContext) -> Any:
    return ctx.training.adapter.trainer


def adapter_of(ctx: RunContext) -> Any:
    return ctx.training.adapter


def probe_for(ctx: RunContext, run: PhaseRun, **kwargs: Any) -> StepProbe:
    """A step probe that reports the phase's progress and stops the trainer's loop on a cancel
    or at the phase's time ceiling (the check raises inside the loop, which unwinds it)."""

    def on_step(step: int, total: int, loss: float | None) -> None:
        ctx.progress(run.step.key, step, total, loss)
        ctx.check_cancel()

    return StepProbe(on_step=on_step, **kwargs)


def from_start(ctx: RunContext) -> None:
    """Weights as captured, a fresh optimizer and schedule: a gate that is a run starts there."""
    trainer = trainer_of(ctx)
    loop.restore(loop.unwrapped(trainer), ctx.memo[INITIAL])
    loop.fresh_optimizer(trainer)
