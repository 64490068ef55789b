"""The trainer campaign's phase bodies by name, and what every body of it shares.

Same phase names and rows as any campaign (the phase table is unchanged); `BODIES` replaces the
registered bodies for a campaign whose task is a `trainer_script` (`RunContext.bodies`). The
bodies live in `data_gates.py`, `engine_gates.py`, `steady_gate.py`, `resume_gate.py` and `board.py`; what each
runs: docs/trainer.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...context import RunContext
from ...phases.base import Outcome, PhaseRun
from ...phases.stack import stack as stack_body
from . import loop
from .probe import StepProbe

Body = Callable[[RunContext, PhaseRun], Outcome]
BODIES: dict[str, Body] = {"stack": stack_body}
INITIAL = "trainer_initial_weights"
EXPORT_MEMO = "trainer_export"


def body(name: str) -> Callable[[Body], Body]:
    def register(fn: Body) -> Body:
        BODIES[name] = fn
        return fn

    return register


def trainer_of(ctx: RunContext) -> Any:
    return ctx.adapter.trainer  # type: ignore[attr-defined]


def adapter_of(ctx: RunContext) -> Any:
    return ctx.adapter  # type: ignore[attr-defined]


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
