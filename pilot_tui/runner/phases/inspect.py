"""`inspect`: the examples exactly as the model receives them, and what the loss sees (R1, R2).

One scan for every training (`checks/inspection`): the training says what to scan — its task, its
max length, the model's output size — and adds the batches its own loop gets where they differ
from single examples (a captured trainer's collator, accumulation window and normaliser).
"""

from __future__ import annotations

from ...analysis.checks import Check, CheckResult, verdict_of
from ...tasks.contract import Task
from ..checks.inspection import inspect_task
from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("inspect")
def inspect(ctx: RunContext, run: PhaseRun) -> Outcome:
    show = int(run.overrides.get("inspect_examples") or ctx.spec.inspect.examples)
    seen = ctx.training.inspection(ctx, run, show)
    result = inspect_task(
        seen.task,
        max_length=seen.max_length,
        supervise_prompt=ctx.spec.task.supervise_prompt,
        declared_names=seen.declared_names,
        show=show,
        microbatch=seen.microbatch,
        splits=seen.splits,
        output=seen.output,
        digests=seen.digests,
    )
    result = with_task_checks(seen.task, result)
    ctx.training.after_inspection(ctx, seen)
    details = result.details | seen.details
    verdict, reason = result.verdict, result.reason
    view = ctx.training.loop_view(ctx, show)
    if view is not None:
        checks = [*as_checks(result.details.get("checks", [])), *view.checks]
        verdict, reason = verdict_of(checks)
        details = details | view.details | {"checks": [c.as_dict() for c in checks]}
    return Outcome(verdict=verdict, reason=reason, details=details, params={"inspect_examples": show})


def with_task_checks(task: Task, result: CheckResult) -> CheckResult:
    """The task's own dataset checks (e.g. assistant turns a chat template cannot locate) come
    first and take part in the verdict like the built-in ones."""
    if task.data_checks is None:
        return result
    own = list(task.data_checks())
    checks = [c.as_dict() for c in own] + list(result.details.get("checks", []))
    verdict, reason = verdict_of([*own, *as_checks(result.details.get("checks", []))])
    return CheckResult(verdict, reason, result.details | {"checks": checks})


def as_checks(rows: list[dict]) -> list[Check]:
    return [Check(r["name"], r["verdict"], r["message"], r.get("count", 0), r.get("ids", [])) for r in rows]
