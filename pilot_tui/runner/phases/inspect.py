"""`inspect`: the examples exactly as the model receives them, and what the loss sees (R1, R2).

Thin on purpose: the analysis lives in `runner/checks/inspection.py`; this turns it into a row.
"""

from __future__ import annotations

from ...analysis.checks import Check, CheckResult, verdict_of
from ..checks.inspection import SEEN_MEMO, inspect_task, model_output
from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("inspect")
def inspect(ctx: RunContext, run: PhaseRun) -> Outcome:
    cfg = ctx.config(run.step.variant, run.overrides)
    show = int(run.overrides.get("inspect_examples") or ctx.spec.inspect.examples)
    run.current_input = {"examples": len(ctx.task.examples), "max_length": cfg.max_length}
    # The label range is checked against what the model really outputs: one forward of the
    # first shown microbatch (on the meta device when the model allows, so nothing is allocated).
    train = list(ctx.splits["train"]) or list(range(len(ctx.task.examples)))
    first = [ctx.task.examples[i] for i in train[: max(1, min(cfg.microbatch, show))]]
    output = model_output(ctx.task, ctx.task.collate(first, cfg.max_length), ctx.device, ctx.spec.optim.seed)
    digests: list[tuple[str, str]] = []
    result = inspect_task(
        ctx.task,
        max_length=cfg.max_length,
        supervise_prompt=ctx.spec.task.supervise_prompt,
        declared_names=ctx.spec.task.class_names,
        show=show,
        microbatch=cfg.microbatch,
        splits=ctx.splits,
        output=output,
        digests=digests,
    )
    result = with_task_checks(ctx, result)
    # What the model sees, hashed in the same pass: the split check reuses it (one collate of the
    # whole dataset instead of two).
    ctx.memo[SEEN_MEMO] = (cfg.max_length, len(ctx.task.examples), digests)
    result.details["output_probe"] = output.how or "failed"
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
