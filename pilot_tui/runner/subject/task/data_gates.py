"""The data gates on the pilot's own loop: what `inspect` scans and `split` checks over a task."""

from __future__ import annotations

from ....analysis.leakage import check_splits
from ....analysis.splits import group_split
from ...checks.inspection import SEEN_MEMO, model_output, seen_digests
from ...context import Outcome, PhaseRun, RunContext
from ..base import InspectionInput


def inspection(ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
    cfg = ctx.config(run.step.variant, run.overrides)
    run.current_input = {"examples": len(ctx.task.examples), "max_length": cfg.max_length}
    # The label range is checked against what the model really outputs: one forward of the
    # first shown microbatch (on the meta device when the model allows, so nothing is allocated).
    train = list(ctx.splits["train"]) or list(range(len(ctx.task.examples)))
    first = [ctx.task.examples[i] for i in train[: max(1, min(cfg.microbatch, show))]]
    output = model_output(ctx.task, ctx.task.collate(first, cfg.max_length), ctx.device, ctx.spec.optim.seed)
    return InspectionInput(
        task=ctx.task,
        max_length=cfg.max_length,
        declared_names=ctx.spec.task.class_names,
        microbatch=cfg.microbatch,
        splits=ctx.splits,
        output=output,
        digests=[],
        details={"output_probe": output.how or "failed"},
    )


def after_inspection(ctx: RunContext, seen: InspectionInput) -> None:
    # What the model sees, hashed in the same pass: the split check reuses it (one collate of the
    # whole dataset instead of two).
    ctx.memo[SEEN_MEMO] = (seen.max_length, len(ctx.task.examples), seen.digests)


def split_check(ctx: RunContext, run: PhaseRun) -> Outcome:
    """Train / validation / test without leakage, on the splits the runner really uses (R4)."""
    s, task = ctx.spec, ctx.task
    ratios = {"train": s.split.train, "validation": s.split.validation, "test": s.split.test}
    by_time = s.task.group_kind == "time"
    expected = None
    if not s.split.field:
        # The split is only worth checking if it is the one every later run will get again.
        expected = group_split(task.examples, ctx.group_key, ratios, s.split.seed, by_time=by_time)
    time_key = task.time_key if task.time_key and all(task.time_key in ex for ex in task.examples) else ""
    run.current_input = {"examples": len(task.examples), "group_key": ctx.group_key}
    # What the model sees, collated as training collates it: near-duplicates that differ only in
    # metadata or in the label hash the same here and not in the field hash.
    cached = ctx.memo.get(SEEN_MEMO)
    if cached is not None and cached[:2] == (ctx.max_length, len(task.examples)):
        seen = cached[2]  # hashed by inspect in its own pass over the same collate
    else:
        seen = seen_digests(task, ctx.max_length)
    result = check_splits(
        task.examples,
        ctx.splits,
        group_key=ctx.group_key,
        group_kind=s.task.group_kind,
        task_group_key=task.group_key,
        split_field=s.split.field,
        time_key=time_key,
        ratios=None if s.split.field else ratios,
        expected=expected,
        seen=seen,
    )
    details = result.details
    if not s.split.field:
        details["seed"] = s.split.seed
    return Outcome(verdict=result.verdict, reason=result.reason, details=details)
