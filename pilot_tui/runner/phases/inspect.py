"""`inspect`: the examples exactly as the model receives them, and what the loss sees (R1, R2).

Thin on purpose: the analysis lives in `runner/inspection.py`; this turns it into a row.
"""

from __future__ import annotations

from ...checks import Check, CheckResult, verdict_of
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
    result = with_task_checks(ctx, result)
    return Outcome(
        verdict=result.verdict,
        reason=result.reason,
        details=result.details,
        params={"inspect_examples": show},
    )


def with_task_checks(ctx: RunContext, result: CheckResult) -> CheckResult:
    """The task's own dataset checks (e.g. assistant turns a chat template cannot locate) come
    first and take part in the verdict like the built-in ones."""
    if ctx.task.data_checks is None:
        return result
    own = list(ctx.task.data_checks())
    checks = [c.as_dict() for c in own] + list(result.details.get("checks", []))
    verdict, reason = verdict_of([*own, *_as_checks(result.details.get("checks", []))])
    return CheckResult(verdict, reason, result.details | {"checks": checks})


def _as_checks(rows: list[dict]) -> list[Check]:
    return [Check(r["name"], r["verdict"], r["message"], r.get("count", 0), r.get("ids", [])) for r in rows]
