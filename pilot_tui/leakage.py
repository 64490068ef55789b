"""Leakage checks on train / validation / test splits (R4). Pure: no torch.

The checks run on the splits the runner really uses. A group (conversation, patient, document,
period) must sit in one split only; an identical example must not sit in two; a time period key
must put validation and test after train.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .checks import FAIL, PASS, SHOW_IDS, WARN, Check, CheckResult, listing, verdict_of
from .splits import SPLITS

Example = Mapping[str, Any]


def normalise(value: Any) -> Any:
    """Case and spacing do not make two examples different; nor does the order of a mapping's keys."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value).strip().casefold()
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def input_hash(example: Example, exclude: Iterable[str]) -> str:
    """SHA-256 of the normalised example without its identity fields (id, group keys, split)."""
    skip = set(exclude)
    content = {k: v for k, v in example.items() if k not in skip}
    text = json.dumps(normalise(content), sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _example_id(examples: Sequence[Example], i: int) -> str:
    return str(examples[i].get("id", i))


def _membership(splits: Mapping[str, Sequence[int]]) -> dict[int, list[str]]:
    where: dict[int, list[str]] = collections.defaultdict(list)
    for name in SPLITS:
        for i in splits.get(name, []):
            where[i].append(name)
    return where


def _groups_by_split(
    examples: Sequence[Example], splits: Mapping[str, Sequence[int]], key: str
) -> dict[str, dict[str, int]]:
    """group -> {split: examples of the group in it}."""
    out: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for name in SPLITS:
        for i in splits.get(name, []):
            out[str(examples[i][key])][name] += 1
    return out


def _shared(groups: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    return [
        {"group": g, "splits": [s for s in SPLITS if s in where], "examples": sum(where.values())}
        for g, where in sorted(groups.items())
        if len(where) > 1
    ]


def _shared_check(name: str, key: str, shared: list[dict[str, Any]], what: str) -> Check:
    if not shared:
        return Check(name, PASS, f"no {key} is in two splits")
    named = [f"{s['group']} ({'+'.join(s['splits'])})" for s in shared[:SHOW_IDS]]
    return Check(
        name,
        FAIL,
        f"{len(shared)} {what} in two splits: {listing(named, len(shared))}",
        len(shared),
        [s["group"] for s in shared[:SHOW_IDS]],
    )


def _sortable(values: Sequence[Any]) -> list[Any]:
    """Periods compare as numbers when they all are, else as text (ISO dates sort as text)."""
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return [str(v) for v in values]


def time_order(
    examples: Sequence[Example], splits: Mapping[str, Sequence[int]], key: str
) -> tuple[Check, dict[str, Any]]:
    """Validation and test must come after train when the group is a time period (warn)."""
    raw = [examples[i][key] for i in range(len(examples))]
    values = _sortable(raw)
    first_last = {
        name: (min(idx, key=values.__getitem__), max(idx, key=values.__getitem__))
        for name in SPLITS
        if (idx := list(splits.get(name, [])))
    }
    span = {name: (values[lo], values[hi]) for name, (lo, hi) in first_last.items()}
    # Shown as written in the data; compared as `_sortable` reads them.
    order = {f"{name}_first": str(raw[lo]) for name, (lo, _) in first_last.items()}
    order |= {f"{name}_last": str(raw[hi]) for name, (_, hi) in first_last.items()}
    shown = {name: (str(raw[lo]), str(raw[hi])) for name, (lo, hi) in first_last.items()}
    if "train" not in span:
        return Check("time_order", PASS, "no training examples to order"), order
    train_last = span["train"][1]
    early = [
        f"{name} starts at {shown[name][0]} before train ends at {shown['train'][1]}"
        for name in ("validation", "test")
        if name in span and span[name][0] <= train_last
    ]
    if early:
        return (
            Check(
                "time_order",
                WARN,
                f"{key} is a time period but {' and '.join(early)}: the evaluation looks back in time",
                len(early),
            ),
            order,
        )
    return Check("time_order", PASS, f"validation and test come after train ({key})"), order


def check_splits(
    examples: Sequence[Example],
    splits: Mapping[str, Sequence[int]],
    *,
    group_key: str,
    group_kind: str = "id",
    task_group_key: str = "",
    split_field: str = "",
    time_key: str = "",
    ratios: Mapping[str, float] | None = None,
    expected: Mapping[str, Sequence[int]] | None = None,
) -> CheckResult:
    """Every leakage check on `splits`; see docs/checks.md for the details' shape.

    `expected` is the split recomputed from the same ratios and seed: a difference means the
    split the runner uses is not reproducible.
    """
    n = len(examples)
    checks: list[Check] = []
    sizes = {name: len(splits.get(name, [])) for name in SPLITS}

    where = _membership(splits)
    twice = sorted(i for i, names in where.items() if len(names) > 1)
    nowhere = [i for i in range(n) if i not in where]
    if twice:
        checks.append(
            Check(
                "coverage",
                FAIL,
                f"{len(twice)} examples are in two splits at once: "
                + listing([_example_id(examples, i) for i in twice[:3]], len(twice)),
                len(twice),
                [_example_id(examples, i) for i in twice[:SHOW_IDS]],
            )
        )
    elif nowhere:
        checks.append(
            Check(
                "coverage",
                WARN,
                f"{len(nowhere)} of {n} examples are in no split",
                len(nowhere),
                [_example_id(examples, i) for i in nowhere[:SHOW_IDS]],
            )
        )
    else:
        checks.append(Check("coverage", PASS, f"each of the {n} examples is in exactly one split"))

    empty = [name for name in ("train", "validation") if not sizes[name]]
    if empty:
        checks.append(Check("sizes", FAIL, f"the {' and '.join(empty)} split is empty", len(empty)))
    elif not sizes["test"] and not split_field and ratios and ratios.get("test", 0) > 0:
        checks.append(Check("sizes", WARN, f"the test split is empty although split.test = {ratios['test']}"))
    else:
        checks.append(Check("sizes", PASS, ", ".join(f"{k} {v}" for k, v in sizes.items())))

    groups = _groups_by_split(examples, splits, group_key)
    shared = _shared(groups)
    checks.append(_shared_check("groups", group_key, shared, f"{group_key} groups are"))

    task_shared: list[dict[str, Any]] = []
    if task_group_key and task_group_key != group_key and all(task_group_key in ex for ex in examples):
        task_shared = _shared(_groups_by_split(examples, splits, task_group_key))
        check = _shared_check(
            "task_groups",
            task_group_key,
            task_shared,
            f"groups of the task's own unit of leakage ({task_group_key!r}, the campaign splits by {group_key!r}) are",
        )
        checks.append(check)

    identity = {"id", group_key, task_group_key, split_field, time_key} - {""}
    by_hash: dict[str, list[int]] = collections.defaultdict(list)
    for i, ex in enumerate(examples):
        by_hash[input_hash(ex, identity)].append(i)
    duplicates = []
    for digest, members in by_hash.items():
        in_splits = sorted({s for i in members for s in where.get(i, [])}, key=SPLITS.index)
        if len(in_splits) > 1:
            duplicates.append(
                {
                    "hash": digest[:16],
                    "ids": [_example_id(examples, i) for i in members[:SHOW_IDS]],
                    "splits": in_splits,
                }
            )
    if duplicates:
        named = [f"{' = '.join(d['ids'][:2])} ({'+'.join(d['splits'])})" for d in duplicates[:3]]
        checks.append(
            Check(
                "duplicates",
                FAIL,
                f"{len(duplicates)} identical examples (same normalised input) are in two splits: "
                + listing(named, len(duplicates)),
                len(duplicates),
                [d["ids"][0] for d in duplicates[:SHOW_IDS]],
            )
        )
    else:
        checks.append(Check("duplicates", PASS, "no identical example is in two splits"))

    if expected is not None:
        same = all(list(expected.get(s, [])) == list(splits.get(s, [])) for s in SPLITS)
        if same:
            checks.append(Check("deterministic", PASS, "the same ratios and seed give the same split"))
        else:
            checks.append(
                Check(
                    "deterministic",
                    FAIL,
                    "recomputing the split from the same ratios and seed gives another split",
                )
            )

    details: dict[str, Any] = {
        "source": "field" if split_field else "ratios",
        "group_key": group_key,
        "group_kind": group_kind,
        "sizes": sizes,
        "groups": {name: sum(1 for w in groups.values() if name in w) for name in SPLITS},
        "shared_groups": shared[:SHOW_IDS],
        "shared_groups_count": len(shared),
        "duplicates": duplicates[:SHOW_IDS],
        "duplicates_count": len(duplicates),
        "identity_fields": sorted(identity),
    }
    if split_field:
        details["field"] = split_field
    if ratios is not None:
        details["ratios"] = dict(ratios)
    if task_group_key and task_group_key != group_key:
        details["task_group_key"] = task_group_key
        details["task_shared_groups"] = task_shared[:SHOW_IDS]
        details["task_shared_groups_count"] = len(task_shared)
    if group_kind == "time":
        check, order = time_order(examples, splits, time_key or group_key)
        checks.append(check)
        details["time_order"] = order
    verdict, reason = verdict_of(checks)
    details["checks"] = [c.as_dict() for c in checks]
    return CheckResult(verdict, reason, details)
