"""Group-aware, deterministic train / validation / test splits (R4). Pure: no torch."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SPLITS = ("train", "validation", "test")


def _order_key(seed: int, group: str) -> str:
    return hashlib.sha256(f"{seed}:{group}".encode()).hexdigest()


def _period_key(values: Mapping[str, Any]) -> Callable[[str], Any]:
    """Periods sort as numbers when they all are (month 2 before month 10), else as text (ISO
    dates sort as text): the same reading as the `time_order` check in leakage.py."""
    try:
        numbers = {g: float(v) for g, v in values.items()}
    except (TypeError, ValueError):
        return str
    return numbers.__getitem__


def group_split(
    examples: Sequence[Mapping[str, Any]],
    group_key: str,
    ratios: Mapping[str, float],
    seed: int,
    by_time: bool = False,
) -> dict[str, list[int]]:
    """Assign whole groups to splits so that no group is in two splits.

    Groups are ordered by a seeded hash (or by their value when the key is a time period, so
    validation and test come after train), then filled in order until each split reaches its
    share of *examples*.
    """
    groups: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(str(ex[group_key]), []).append(i)
    if by_time:
        names = sorted(groups, key=_period_key({g: examples[ix[0]][group_key] for g, ix in groups.items()}))
    else:
        names = sorted(groups, key=lambda g: _order_key(seed, g))
    total = len(examples)
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    order = [s for s in SPLITS if ratios.get(s, 0.0) > 0]
    idx, filled = 0, 0
    for n, g in enumerate(names):
        current = order[idx]
        out[current].extend(groups[g])
        filled += len(groups[g])
        groups_left, splits_left = len(names) - n - 1, len(order) - idx - 1
        # Advance once this split has its share of examples, or when every later split
        # needs one of the remaining groups.
        if splits_left and (filled >= ratios[current] * total or groups_left <= splits_left):
            idx, filled = idx + 1, 0
    return out


def field_split(examples: Sequence[Mapping[str, Any]], field: str) -> dict[str, list[int]]:
    """Ready splits: each example names its split in `field`."""
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, ex in enumerate(examples):
        name = str(ex.get(field, ""))
        if name not in out:
            raise ValueError(f"example {i} has split {name!r} in field {field!r}; expected one of {SPLITS}")
        out[name].append(i)
    return out
