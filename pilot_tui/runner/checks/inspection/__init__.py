"""What the loss really sees: the analysis behind the `inspect` phase (R1, R2), by kind of task.

Pure analysis over a task and its collated batches; it returns plain dicts ready for a record row
and knows nothing of phases or events, so it can be called on any task — the pilot's own, or a
captured trainer's rows seen as one. The whole dataset is collated in a few large batches
(`CHUNK` examples each), never example by example: the scan must stay cheap enough to run before
every campaign. `common` holds what every kind shares, `lm` a causal LM's scan, checks and
rendering, `classifier` a classifier's; `inspect_task` picks by the task's kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ....analysis.checks import CheckResult, paused_gc, verdict_of
from ....tasks.contract import CAUSAL_LM, TOKEN_CLASSIFICATION, Task
from .classifier import inspect_classification
from .common import (
    SEEN_MEMO,
    ModelOutput,
    batches,
    inspect_token_labels,
    model_output,
    pick_shown,
    seen_digests,
)
from .lm import inspect_lm, render, role_of

__all__ = [
    "SEEN_MEMO",
    "ModelOutput",
    "batches",
    "inspect_task",
    "model_output",
    "pick_shown",
    "render",
    "role_of",
    "seen_digests",
]


@paused_gc()
def inspect_task(
    task: Task,
    *,
    max_length: int,
    supervise_prompt: bool,
    declared_names: Sequence[str],
    show: int,
    microbatch: int,
    splits: Mapping[str, Sequence[int]],
    output: ModelOutput | None = None,
    digests: list[tuple[str, str]] | None = None,
) -> CheckResult:
    """Scan the whole dataset, run the checks, render `show` examples; see docs/checks.md.

    `output` is the model's output size from one forward (`model_output`); without it labels
    are not checked against the model. `digests` receives `seen_digests(task, max_length)`
    from the same collate pass."""
    split_of = {i: name for name, idx in splits.items() for i in idx}
    train = list(splits.get("train", [])) or list(range(len(task.examples)))
    details: dict[str, Any] = {"kind": task.kind, "examples_scanned": len(task.examples)}
    if task.kind == TOKEN_CLASSIFICATION:
        checks, found = inspect_token_labels(task, max_length)
    elif task.kind == CAUSAL_LM:
        checks, found = inspect_lm(
            task,
            max_length=max_length,
            supervise_prompt=supervise_prompt,
            show=show,
            microbatch=microbatch,
            train=train,
            split_of=split_of,
            output=output,
            digests=digests,
        )
    else:
        checks, found = inspect_classification(
            task,
            max_length=max_length,
            declared_names=declared_names,
            show=show,
            train=train,
            split_of=split_of,
            output=output,
            digests=digests,
        )
    details |= found
    verdict, reason = verdict_of(checks)
    details["checks"] = [c.as_dict() for c in checks]
    return CheckResult(verdict, reason, details)
