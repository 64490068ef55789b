"""Leakage checks on train / validation / test splits (R4). Pure: no torch.

The checks run on the splits the runner really uses. A group (conversation, patient, document,
period) must sit in one split only; an identical example must not sit in two; a time period key
must put validation and test after train.
"""

from __future__ import annotations

import collections
import hashlib
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.verdict import FAIL, PASS, WARN
from .checks import SHOW_IDS, Check, CheckResult, listing, paused_gc, verdict_of
from .splits import SPLITS, period_key

Example = Mapping[str, Any]


_NUMBERS = frozenset((int, float))


def normalise(value: Any) -> Any:
    """Case and spacing do not make two examples different; nor does the order of a mapping's keys."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value).strip().casefold()
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        if set(map(type, value)) <= _NUMBERS:
            # Feature vectors, the common case, at C speed: 1 and 1.0 read the same as floats.
            return list(map(float, value))
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _flat(value: Any) -> Any:
    """`normalise` without a call for the plain values most fields hold."""
    kind = type(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is str:
        return " ".join(value.split()).casefold()
    return normalise(value)


def input_hash(example: Example, exclude: Iterable[str]) -> str:
    """SHA-256 of the normalised example without its identity fields (id, group keys, split)."""
    skip = exclude if isinstance(exclude, frozenset) else frozenset(exclude)
    digest = hashlib.sha256()
    for k in sorted(example, key=str):
        if k in skip:
            continue
        value = example[k]
        digest.update(repr(str(k)).encode())
        if type(value) in (list, tuple) and set(map(type, value)) <= _NUMBERS:
            # A feature vector as doubles: 1 and 1.0 hash the same, with no repr per number.
            digest.update(b"#" + array("d", value).tobytes())
        else:
            # Values normalised: repr is canonical (and several times faster than json).
            digest.update(b"=" + repr(_flat(value)).encode())
    return digest.hexdigest()


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


def time_order(
    examples: Sequence[Example], splits: Mapping[str, Sequence[int]], key: str
) -> tuple[Check, dict[str, Any]]:
    """Validation and test must come after train when the group is a time period (warn)."""
    raw = [examples[i][key] for i in range(len(examples))]
    try:
        order_of = period_key(raw)
    except ValueError as exc:
        return Check("time_order", FAIL, f"{key}: {exc}"), {}
    values = [order_of(v) for v in raw]
    first_last = {
        name: (min(idx, key=values.__getitem__), max(idx, key=values.__getitem__))
        for name in SPLITS
        if (idx := list(splits.get(name, [])))
    }
    span = {name: (values[lo], values[hi]) for name, (lo, hi) in first_last.items()}
    # Shown as written in the data; compared as `period_key` reads them (the splitter's order).
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


# Field names that say "an identifier of a unit": `patient_id`, `userId`, `session`, `doc`, ….
ID_LIKE = re.compile(
    r"(^|[_\W])(id|uid|uuid|key)$|^(patient|subject|user|customer|person|participant|speaker|"
    r"author|session|conversation|dialog(ue)?|document|doc|thread|account|device|household|family|"
    r"visit|encounter|case|study|site|hospital|school|company|source|repo(sitory)?|project|image|video|file)s?$",
    re.IGNORECASE,
)
CAMEL_ID = re.compile(r"[a-z](Id|ID|Key)$")  # patientId, userID: case-sensitive, or "valid" would match


def id_like_fields(examples: Sequence[Example], skip: Iterable[str]) -> list[str]:
    """Fields named like the identifier of a unit, present in every example, with values that
    repeat (a value held by one example only cannot put a unit in two splits) and enough of them
    to be split by (a `source` of two channels is a stratum, not a unit)."""
    if not examples:
        return []
    skipped = set(skip)
    out = []
    for key in examples[0]:
        key = str(key)
        if key in skipped or not (ID_LIKE.search(key) or CAMEL_ID.search(key)):
            continue
        values = [ex.get(key) for ex in examples]
        if any(v is None or isinstance(v, Mapping | list | float) for v in values):
            continue
        distinct = len({str(v) for v in values})
        if min(10, max(3, len(values) // 4)) <= distinct < len(values):
            out.append(key)
    return out


def _other_units_check(
    examples: Sequence[Example], splits: Mapping[str, Sequence[int]], fields: Sequence[str], group_key: str
) -> tuple[Check, dict[str, int]]:
    """The declared group key may not be the real unit: another id-like field in two splits."""
    spans = {}
    for key in fields:
        shared = _shared(_groups_by_split(examples, splits, key))
        if shared:
            spans[key] = len(shared)
    if not spans:
        named = f" ({', '.join(fields)})" if fields else ""
        return Check("other_units", PASS, f"no other id-like field{named} is in two splits"), spans
    parts = [f"{key}: {count} values" for key, count in spans.items()]
    return (
        Check(
            "other_units",
            WARN,
            f"the campaign groups by {group_key!r} but another id-like field spans the splits "
            f"({'; '.join(parts)} in two splits): if {' or '.join(map(repr, spans))} is the real unit "
            "(e.g. one patient, several visits), validation sees it in training — group by it",
            sum(spans.values()),
            list(spans)[:SHOW_IDS],
        ),
        spans,
    )


def _same_input_check(
    examples: Sequence[Example],
    where: Mapping[int, list[str]],
    seen: Sequence[tuple[str, str]],
    field_hash: Mapping[int, str],
) -> tuple[Check, list[dict[str, Any]]]:
    """The same input as the model sees it (collated, labels left out) in two splits: a leak the
    field hash misses when examples differ only in metadata or in the label. Conflicting labels
    fail (the same input is taught one answer and graded on another); equal labels warn."""
    by_input: dict[str, list[int]] = collections.defaultdict(list)
    for i, (digest, _label) in enumerate(seen):
        by_input[digest].append(i)
    found = []
    for digest, members in by_input.items():
        in_splits = sorted({s for i in members for s in where.get(i, [])}, key=SPLITS.index)
        if len(in_splits) < 2:
            continue
        if len({field_hash[i] for i in members}) == 1:
            continue  # identical in every field too: the `duplicates` check reports it
        conflict = len({seen[i][1] for i in members}) > 1
        found.append(
            {
                "hash": digest[:16],
                "ids": [_example_id(examples, i) for i in members[:SHOW_IDS]],
                "splits": in_splits,
                "labels_conflict": conflict,
            }
        )
    if not found:
        return Check("same_input", PASS, "no input the model sees is in two splits"), found
    conflicts = [d for d in found if d["labels_conflict"]]
    shown = conflicts or found
    named = [f"{' = '.join(d['ids'][:2])} ({'+'.join(d['splits'])})" for d in shown[:3]]
    if conflicts:
        return (
            Check(
                "same_input",
                FAIL,
                f"{len(conflicts)} inputs the model sees identically (collated, labels aside) are in two "
                f"splits with conflicting labels: {listing(named, len(conflicts))}"
                + (
                    f"; {len(found) - len(conflicts)} more with equal labels"
                    if len(found) > len(conflicts)
                    else ""
                ),
                len(conflicts),
                [d["ids"][0] for d in conflicts[:SHOW_IDS]],
            ),
            found,
        )
    return (
        Check(
            "same_input",
            WARN,
            f"{len(found)} inputs the model sees identically are in two splits (they differ only in "
            "what the model does not see: another field such as a date or a source, or tokens past "
            f"max_length): {listing(named, len(found))}",
            len(found),
            [d["ids"][0] for d in found[:SHOW_IDS]],
        ),
        found,
    )


# Fewer validation examples than this make a validation loss that means nothing.
MIN_VALIDATION = 2


@paused_gc()
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
    seen: Sequence[tuple[str, str]] | None = None,
) -> CheckResult:
    """Every leakage check on `splits`; see docs/checks.md for the details' shape.

    `expected` is the split recomputed from the same ratios and seed: a difference means the
    split the runner uses is not reproducible. `seen` is, per example, a digest of the input
    the model sees and one of its labels (computed by the runner from the collate).
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
    got = ", ".join(f"{k} {v}" for k, v in sizes.items())
    if empty:
        checks.append(
            Check("sizes", FAIL, f"the {' and '.join(empty)} split is empty ({got} examples)", len(empty))
        )
    elif sizes["validation"] < MIN_VALIDATION:
        checks.append(
            Check(
                "sizes",
                FAIL,
                f"the validation split holds {sizes['validation']} example ({got} examples): a validation "
                "loss over one example says nothing about generalisation — add data or raise split.validation",
                1,
            )
        )
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
    others = id_like_fields(examples, identity)
    other_check, other_spans = _other_units_check(examples, splits, others, group_key)
    checks.append(other_check)

    by_hash: dict[str, list[int]] = collections.defaultdict(list)
    field_hash: dict[int, str] = {}
    frozen_identity = frozenset(identity)
    for i, ex in enumerate(examples):
        field_hash[i] = digest = input_hash(ex, frozen_identity)
        by_hash[digest].append(i)
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

    same_input: list[dict[str, Any]] = []
    if seen is not None:
        same_check, same_input = _same_input_check(examples, where, seen, field_hash)
        checks.append(same_check)

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
        "other_id_fields": others,
        "other_id_fields_shared": other_spans,
    }
    if seen is not None:
        details["same_input"] = same_input[:SHOW_IDS]
        details["same_input_count"] = len(same_input)
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
