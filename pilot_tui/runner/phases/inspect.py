"""`inspect`: the examples exactly as the model receives them, and what the loss sees (R1, R2).

Thin on purpose: the analysis lives in `runner/inspection.py`; this turns it into a row.
"""

from __future__ import annotations

from ..context import RunContext
from ..inspection import inspect_task
from .base import Outcome, PhaseRun, phase


@phase("inspect")
def inspect(ctx: RunContext, run: PhaseRun) -> Outcome:
    cfg = ctx.config(run.step.variant, run.overrides)
    show = int(run.overrides.get("inspect_examples") or ctx.spec.inspect.examples)
    run.current_input = {"examples": len(ctx.task.examples), "max_length": cfg.max_length}
    result = inspect_task(
        ctx.task,
        max_length=cfg.max_length,
        supervise_prompt=ctx.spec.task.supervise_prompt,
        declared_names=ctx.spec.task.class_names,
        show=show,
        microbatch=cfg.microbatch,
        splits=ctx.splits,
    )
    return Outcome(
        verdict=result.verdict,
        reason=result.reason,
        details=result.details,
        params={"inspect_examples": show},
    )
