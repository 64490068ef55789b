"""Group-aware, deterministic train / validation / test splits (R4). Pure: no torch."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SPLITS = ("train", "validation", "test")


def _order_key(seed: int, group: str) -> str:
    return hashlib.sha256(f"{seed}:{group}".encode()).hexdigest()


MONTHS = {
    m: k
    for k, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}


def _shape(value: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """A period read as dates are: its numbers as numbers (`2024-5` before `2024-12`), month
    names as their number; the text between them is its shape, which every period must share."""
    shape, parts = [], []
    for token in re.findall(r"\d+|[^\W\d_]+", str(value).strip().casefold()):
        if token.isdigit():
            shape.append("#")
            parts.append(int(token))
        elif token[:3] in MONTHS and (len(token) == 3 or token.startswith(_FULL.get(token[:3], token))):
            shape.append("#")
            parts.append(MONTHS[token[:3]])
        else:
            shape.append(token)
            parts.append(token)
    return tuple(shape), tuple(parts)


_FULL = {
    m[:3]: m
    for m in [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
}


def period_key(values: Iterable[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """How periods are ordered — by the splitter and by the `time_order` check alike.

    Numbers compare as numbers (month 2 before month 10); other periods naturally, as dates
    (`2024-5` before `2024-12`, `2024-Q1` before `2024-Q3`, `may-2024` before `dec-2024`).
    Periods that hold no number, or are written in different shapes, cannot be ordered:
    `ValueError` naming two of them, never an alphabetical guess.
    """
    values = list(values)
    try:
        numbers = {str(v): float(v) for v in values}
        return lambda v: (numbers[str(v)],)
    except (TypeError, ValueError):
        pass
    shapes: dict[tuple[str, ...], Any] = {}
    keys: dict[str, tuple[Any, ...]] = {}
    for v in values:
        shape, parts = _shape(v)
        if "#" not in shape:
            raise ValueError(f"period {str(v)!r} holds no number or date: periods cannot be ordered in time")
        shapes.setdefault(shape, v)
        keys[str(v)] = parts
    if len(shapes) > 1:
        a, b = list(shapes.values())[:2]
        raise ValueError(
            f"periods {str(a)!r} and {str(b)!r} are written in different shapes: they cannot be ordered "
            "in time (write every period the same way, e.g. YYYY-MM)"
        )
    # A year written last (`05/2024`, `May 2024`) still orders first: a position whose numbers
    # are all four digits or more is a year.
    (shape,) = shapes
    slots = [k for k, part in enumerate(shape) if part == "#"]
    years = [k for k in slots if all(p[k] >= 1000 for p in keys.values())]
    order = years + [k for k in range(len(shape)) if k not in years]
    ordered = {v: tuple(p[k] for k in order) for v, p in keys.items()}
    return lambda v: ordered[str(v)]


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
        first = {g: examples[ix[0]][group_key] for g, ix in groups.items()}
        key = period_key(first.values())
        names = sorted(groups, key=lambda g: key(first[g]))
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
