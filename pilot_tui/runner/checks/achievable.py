"""What a tiny subset allows: the recovery and the loss an ideal model could reach on it (R3).

Two targets whose whole context is identical but whose labels differ cannot both be recovered
by an argmax, and their loss cannot go below the entropy of their labels: real text chunks that
share a prefix do this. The overfit gate judges the loop against this, not against 100 %.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ...tasks.contract import CAUSAL_LM, Batch, Task


@dataclass(frozen=True)
class Achievable:
    """Best possible argmax recovery and lowest possible mean loss on the subset."""

    recovery: float
    min_loss: float
    targets: int
    ambiguous: int  # targets whose context also appears with another label

    def as_dict(self) -> dict[str, float | int]:
        return {
            "achievable_recovery": round(self.recovery, 6),
            "min_loss": round(self.min_loss, 6),
            "ambiguous_targets": self.ambiguous,
        }


def _contexts(task: Task, batch: Batch) -> Iterable[tuple[object, int]]:
    """(context key, label) for every supervised target of the batch, on the CPU."""
    labels = batch["labels"].cpu()
    if task.kind == CAUSAL_LM:
        ids = batch["input_ids"].cpu().tolist()
        for r, row in enumerate(labels[:, 1:].tolist()):
            for t, label in enumerate(row):
                if label != task.ignore_index:
                    # The target at t + 1 sees tokens 0..t (right padding: all of them real).
                    yield tuple(ids[r][: t + 1]), label
        return
    inputs = {k: v.cpu() for k, v in batch.items() if k != "labels" and isinstance(v, torch.Tensor)}
    for r, label in enumerate(labels.reshape(-1).tolist()):
        if label != task.ignore_index:
            key = tuple(
                (k, v[r].numpy().tobytes()) for k, v in sorted(inputs.items()) if v.dim() and len(v) > r
            )
            yield key, label


def achievable(task: Task, batches: Iterable[Batch]) -> Achievable:
    """Group the subset's targets by identical context; each group can get at most its most common
    label right, and its loss cannot go below the entropy of its labels."""
    groups: dict[object, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for batch in batches:
        for key, label in _contexts(task, batch):
            groups[key][label] += 1
    total = sum(sum(c.values()) for c in groups.values())
    if not total:
        return Achievable(1.0, 0.0, 0, 0)
    best = sum(max(c.values()) for c in groups.values())
    entropy = 0.0
    ambiguous = 0
    for counts in groups.values():
        n = sum(counts.values())
        if len(counts) > 1:
            ambiguous += n
            entropy += -sum(k * math.log(k / n) for k in counts.values())
    return Achievable(best / total, entropy / total, total, ambiguous)


def still_improving(curve: list[float], window: int = 10) -> bool:
    """The loss was still falling at the end: the last `window` points average clearly below the
    `window` before them."""
    finite = [x for x in curve if math.isfinite(x)]
    if len(finite) < 2 * window:
        return len(finite) >= 2 and finite[-1] < finite[0]
    last = sum(finite[-window:]) / window
    before = sum(finite[-2 * window : -window]) / window
    return last < before * 0.98
