"""A classifier's examples as the loss sees them: every label, what the task says it means, and
the class map checked against the data (id ↔ name a bijection, R2)."""

from __future__ import annotations

import collections
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....analysis.checks import SHOW_IDS, Check
from ....core.verdict import FAIL, PASS, WARN
from ....tasks.contract import Task
from .common import (
    ModelOutput,
    batches,
    digest_batch,
    example_id,
    ids_line,
    pick_shown,
    piece,
    real_mask,
    shown_ids,
)


@dataclass
class ClassScan:
    """Every example's label, and what the task says it means (when it can)."""

    indices: list[int]
    labels: list[int]
    meanings: list[str] | None


def scan_classification(
    task: Task, max_length: int = 0, digests: list[tuple[str, str]] | None = None
) -> ClassScan:
    indices = list(range(len(task.examples)))
    labels: list[int] = []
    for chunk, batch in batches(task, indices, max_length):
        if digests is not None:
            digests += digest_batch(batch, len(chunk))
        labels += [int(x) for x in batch["labels"].reshape(-1).tolist()]
    if len(labels) != len(indices):
        raise ValueError(
            f"the collate returned {len(labels)} labels for {len(indices)} examples: one class id per example expected"
        )
    meanings = None
    if task.label_meaning is not None:
        meanings = [str(task.label_meaning(task.examples[i])) for i in indices]
    return ClassScan(indices, labels, meanings)


def class_names_in_use(task: Task, declared: Sequence[str]) -> list[str]:
    return list(declared) if declared else list(task.class_names or [])


def classification_checks(
    task: Task, scan: ClassScan, declared: Sequence[str], output: ModelOutput | None = None
) -> list[Check]:
    """Label range against the names (fail) and the model's output (fail), declared names
    against the task's (fail), a name used twice (fail), names against what the labels mean —
    `label_meaning` or an example field holding the names (fail; warn when nothing ties ids to
    meanings), a single class (fail), a class never seen (warn)."""
    names = class_names_in_use(task, declared)
    n = len(scan.indices)
    checks = []
    ncls = len(names)
    if output is not None:
        checks.append(_class_output_check(task, scan, output))
    if ncls:
        bad = [i for i, y in zip(scan.indices, scan.labels, strict=True) if not 0 <= y < ncls]
        if bad:
            values = sorted({scan.labels[i] for i in bad})
            checks.append(
                Check(
                    "label_range",
                    FAIL,
                    f"{len(bad)} of {n} labels are outside [0, {ncls}) for {ncls} class names "
                    f"(values {values[:SHOW_IDS]}) — e.g. {ids_line(task, bad)}",
                    len(bad),
                    shown_ids(task, bad),
                )
            )
        else:
            checks.append(Check("label_range", PASS, f"every label is in [0, {ncls})"))
    else:
        checks.append(
            Check(
                "label_range",
                WARN,
                "neither the campaign (task.class_names) nor the task names the classes: "
                "the label range and the id -> name mapping cannot be checked",
            )
        )

    if scan.meanings is not None and ncls:
        checks.append(_meaning_check(task, scan, names))
    if ncls:
        checks.append(_name_field_check(task, scan, names))

    task_names = list(task.class_names or [])
    twice = sorted({x for x in task_names if task_names.count(x) > 1})
    if twice:
        checks.append(
            Check(
                "class_names",
                FAIL,
                f"the task's class names use {', '.join(map(repr, twice))} twice",
                len(twice),
            )
        )
    elif declared and task_names and list(declared) != task_names:
        diffs = [
            f"id {k}: declared {_name(declared, k)!r}, the task says {_name(task_names, k)!r}"
            for k in range(max(len(declared), len(task_names)))
            if _name(declared, k) != _name(task_names, k)
        ]
        checks.append(
            Check(
                "class_names",
                FAIL,
                f"the declared class_names disagree with the task's ({'; '.join(diffs[:4])})",
                len(diffs),
            )
        )
    else:
        source = "declared" if declared else "the task's"
        checks.append(Check("class_names", PASS, f"{ncls} class names ({source}), each used once"))

    counts = collections.Counter(scan.labels)
    if n > 1 and len(counts) == 1:
        (only,) = counts
        checks.append(
            Check(
                "single_class",
                FAIL,
                f"every one of the {n} labels is class {only}"
                + (f" {names[only]!r}" if 0 <= only < ncls else "")
                + ": a model that always answers it reaches the best loss, and nothing is learnt "
                "(check the label column and the collate)",
                n,
            )
        )
    if ncls:
        unseen = [k for k in range(ncls) if counts[k] == 0]
        if unseen:
            checks.append(
                Check(
                    "class_coverage",
                    WARN,
                    "class "
                    + ", ".join(f"{k} {names[k]!r}" for k in unseen[:SHOW_IDS])
                    + f" never appears in the {n} labels: the mapping is not a bijection with the data",
                    len(unseen),
                )
            )
        else:
            checks.append(Check("class_coverage", PASS, f"each of the {ncls} classes appears in the labels"))
    return checks


def _class_output_check(task: Task, scan: ClassScan, output: ModelOutput) -> Check:
    """Class ids must index the model's logits; a one-logit (BCE) head takes 0 and 1."""
    if output.size is None:
        return Check("label_range_model", FAIL, f"{output.error}: training will fail the same way")
    if output.size == 1 and task.loss is None:
        return Check(
            "label_range_model",
            FAIL,
            "the model outputs one logit but the task has no loss of its own: cross-entropy over a single "
            "class is 0 whatever the weights, so nothing is learnt — give the task a BCE loss "
            "(task.loss) or the model two logits",
        )
    size = 2 if output.size == 1 else output.size
    bad = [i for i, y in zip(scan.indices, scan.labels, strict=True) if not 0 <= y < size]
    head = "one logit (a binary head: labels 0 and 1)" if output.size == 1 else f"{output.size} logits"
    if not bad:
        return Check("label_range_model", PASS, f"every label is in [0, {size}): the model outputs {head}")
    values = sorted({scan.labels[i] for i in bad})
    return Check(
        "label_range_model",
        FAIL,
        f"{len(bad)} of {len(scan.indices)} labels are outside [0, {size}) but the model outputs {head} "
        f"(values {values[:SHOW_IDS]}): the loss raises IndexError (a device-side assert on a GPU) — "
        f"e.g. {ids_line(task, bad)}",
        len(bad),
        shown_ids(task, bad),
    )


@functools.lru_cache(maxsize=4096)
def _norm_name(value: Any) -> str:
    # Cached: a dataset repeats a handful of class names across every example.
    return " ".join(str(value).split()).casefold()


def name_fields(task: Task, names: Sequence[str]) -> list[str]:
    """Example fields whose values are class names: every example holds one of `names` there,
    and at least two different ones (a `label` / `category` column kept beside the ids)."""
    known = {_norm_name(x) for x in names}
    first = task.examples[0] if task.examples else {}
    out = []
    for key, value in first.items():
        if not isinstance(value, str):
            continue
        seen = set()
        for ex in task.examples:
            v = ex.get(key)
            if not isinstance(v, str) or _norm_name(v) not in known:
                break
            seen.add(_norm_name(v))
        else:
            if len(seen) > 1:
                out.append(str(key))
    return out


def _name_field_check(task: Task, scan: ClassScan, names: Sequence[str]) -> Check:
    """names[id] against an example field that holds the names; "unverified" when nothing can."""
    fields = name_fields(task, names)
    if not fields:
        if scan.meanings is not None:
            return Check(
                "name_field", PASS, "no example field holds the class names (label_meaning checks them)"
            )
        return Check(
            "name_field",
            WARN,
            "mapping unverified: nothing ties the class ids to their names (no task.label_meaning and no "
            "example field holding the names) — read id -> name on the shown examples before trusting it",
        )
    best: tuple[str, list[int]] | None = None
    for key in fields:
        wrong = [
            i
            for i, y in zip(scan.indices, scan.labels, strict=True)
            if 0 <= y < len(names) and _norm_name(names[y]) != _norm_name(task.examples[i][key])
        ]
        if best is None or len(wrong) < len(best[1]):
            best = (key, wrong)
    assert best is not None
    key, wrong = best
    if not wrong:
        return Check("name_field", PASS, f"names[id] equals the example field {key!r} in every example")
    by_id: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for i, y in zip(scan.indices, scan.labels, strict=True):
        by_id[y][str(task.examples[i][key])] += 1
    parts = [
        f"id {k} is named {names[k]!r} but its examples say {key}={by_id[k].most_common(1)[0][0]!r}"
        for k in sorted({scan.labels[i] for i in wrong})[:4]
    ]
    data_says = ", ".join(
        f"{k}={by_id[k].most_common(1)[0][0]}" for k in sorted(by_id) if 0 <= k < len(names)
    )
    return Check(
        "name_field",
        FAIL,
        f"the class names disagree with the example field {key!r} in {len(wrong)} of {len(scan.indices)} "
        f"examples: {'; '.join(parts)} (the data says {data_says}; names built in another order than "
        f"the label ids?) — e.g. {ids_line(task, wrong)}",
        len(wrong),
        shown_ids(task, wrong),
    )


def _name(names: Sequence[str], k: int) -> str:
    return names[k] if 0 <= k < len(names) else "(none)"


def _meaning_check(task: Task, scan: ClassScan, names: Sequence[str]) -> Check:
    assert scan.meanings is not None
    by_id: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    wrong: list[int] = []
    for i, y, meaning in zip(scan.indices, scan.labels, scan.meanings, strict=True):
        by_id[y][meaning] += 1
        if 0 <= y < len(names) and names[y] != meaning:
            wrong.append(i)
    if not wrong:
        return Check("label_meaning", PASS, "every label's name matches what the example means")
    first_ids = sorted({scan.labels[i] for i in wrong})
    parts = [
        f"id {k} is named {names[k]!r} but its examples are {by_id[k].most_common(1)[0][0]!r}"
        for k in first_ids[:4]
    ]
    data_says = ", ".join(
        f"{k}={by_id[k].most_common(1)[0][0]}" for k in sorted(by_id) if 0 <= k < len(names)
    )
    return Check(
        "label_meaning",
        FAIL,
        f"the class names disagree with what the labels mean in {len(wrong)} of {len(scan.indices)} "
        f"examples: {'; '.join(parts)} (the data says {data_says}) — e.g. {ids_line(task, wrong)}",
        len(wrong),
        shown_ids(task, wrong),
    )


def class_counts(scan: ClassScan, names: Sequence[str]) -> list[dict[str, Any]]:
    counts = collections.Counter(scan.labels)
    ids = sorted(set(counts) | set(range(len(names))))
    return [{"id": k, "name": _name(names, k), "count": counts[k]} for k in ids]


def show_classification(
    task: Task,
    indices: Sequence[int],
    scan: ClassScan,
    names: Sequence[str],
    split_of: Mapping[int, str],
    name_field: str = "",
) -> list[dict[str, Any]]:
    """Id -> name per shown example, with what the example means when the task can say."""
    shown = []
    batch = task.collate([task.examples[i] for i in indices], 0)
    for r, index in enumerate(indices):
        y = scan.labels[index]
        item: dict[str, Any] = {
            "index": index,
            "id": example_id(task, index),
            "split": split_of.get(index, ""),
            "label": y,
            "name": _name(names, y),
        }
        flags = []
        if scan.meanings is not None:
            item["meaning"] = scan.meanings[index]
            if names and item["name"] != item["meaning"]:
                flags.append("name disagrees with meaning")
        if names and not 0 <= y < len(names):
            flags.append("label out of range")
        if name_field and 0 <= y < len(names):
            item[name_field] = str(task.examples[index][name_field])
            if _norm_name(names[y]) != _norm_name(item[name_field]):
                flags.append(f"name disagrees with {name_field}")
        if "features" in batch:
            values = batch["features"][r].reshape(-1)[:8].tolist()
            more = " …" if batch["features"][r].numel() > 8 else ""
            item["input"] = ", ".join(f"{v:.3g}" for v in values) + more
        elif "input_ids" in batch:
            # Text classification: the real tokens, decoded, as the model gets them.
            real = real_mask(batch)[r]
            pieces = [piece(task, int(t)) for t in batch["input_ids"][r][real].tolist()]
            sep = "" if task.decode_token is not None else " "
            item["input"] = sep.join(pieces)
        item["flags"] = flags
        item["text"] = f"{y} -> {item['name']}" + (f" (means {item['meaning']})" if "meaning" in item else "")
        shown.append(item)
    return shown


def inspect_classification(
    task: Task,
    *,
    max_length: int,
    declared_names: Sequence[str],
    show: int,
    train: list[int],
    split_of: dict[int, str],
    output: ModelOutput | None,
    digests: list[tuple[str, str]] | None,
) -> tuple[list[Check], dict[str, Any]]:
    """A classifier's checks (the class map, R2), and the row's figures with `show` examples."""
    details: dict[str, Any] = {}
    cscan = scan_classification(task, max_length, digests)
    names = class_names_in_use(task, declared_names)
    checks = classification_checks(task, cscan, declared_names, output)
    wrong_meaning = []
    if cscan.meanings is not None and names:
        wrong_meaning = [
            i
            for i, y, m in zip(cscan.indices, cscan.labels, cscan.meanings, strict=True)
            if 0 <= y < len(names) and names[y] != m
        ]
    out_of_range = [
        i for i, y in zip(cscan.indices, cscan.labels, strict=True) if names and not 0 <= y < len(names)
    ]
    fields = name_fields(task, names) if names else []
    wrong_field = [
        i
        for i, y in zip(cscan.indices, cscan.labels, strict=True)
        if fields and 0 <= y < len(names) and _norm_name(names[y]) != _norm_name(task.examples[i][fields[0]])
    ]
    shown = pick_shown(train, (wrong_meaning[:1] + out_of_range[:1] + wrong_field[:1]), show)
    details |= {
        "class_names": names,
        "class_names_source": "declared" if declared_names else ("task" if names else "none"),
        "num_classes": len(names),
        "label_min": min(cscan.labels),
        "label_max": max(cscan.labels),
        "class_counts": class_counts(cscan, names),
        "name_fields": fields,
        "output_size": output.size if output is not None and output.size is not None else -1,
        "examples": show_classification(task, shown, cscan, names, split_of, fields[0] if fields else ""),
    }
    return checks, details
