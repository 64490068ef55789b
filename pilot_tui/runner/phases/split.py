"""`split`: train / validation / test without leakage, on the splits the runner really uses (R4).

Thin on purpose: the checks live in `pilot_tui/leakage.py` (pure, no torch).
"""

from __future__ import annotations

from ...analysis.leakage import check_splits
from ...analysis.splits import group_split
from ..checks.inspection import SEEN_MEMO, seen_digests
from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("split")
def split(ctx: RunContext, run: PhaseRun) -> Outcome:
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
