"""The analysis behind `inspect` and `split`, called directly on the real demo tasks.

The phases themselves are tested through a runner in tests/runner/test_checks.py; here are the
cases a phase cannot reach (splits the runner would never build, a collate without prompt
lengths) and the rendering rules.
"""

from __future__ import annotations

import dataclasses

import pytest

from pilot_tui.analysis.checks import Check, verdict_of
from pilot_tui.analysis.leakage import check_splits, input_hash, time_order
from pilot_tui.analysis.splits import group_split
from pilot_tui.core.verdict import FAIL, PASS, WARN
from pilot_tui.runner.checks.inspection import inspect_task, pick_shown, render, role_of
from pilot_tui.tasks import demo_classify, demo_instruct

RATIOS = {"train": 0.8, "validation": 0.1, "test": 0.1}


def splits_of(task, key: str | None = None):
    return group_split(task.examples, key or task.group_key, RATIOS, 0)


def inspect(task, **kw):
    args = {
        "max_length": task.default_max_length,
        "supervise_prompt": False,
        "declared_names": [],
        "show": 4,
        "microbatch": 4,
        "splits": splits_of(task),
    } | kw
    result = inspect_task(task, **args)
    return result, {c["name"]: c for c in result.details["checks"]}


def without_lengths(task):
    """The same task with a collate that gives neither prompt_length nor raw_length."""

    def collate(examples, max_length):
        batch = task.collate(examples, max_length)
        return {k: v for k, v in batch.items() if k not in ("prompt_length", "raw_length")}

    return dataclasses.replace(task, collate=collate)


# ------------------------------------------------------------------------------------------ tokens


def test_the_label_at_position_zero_never_counts():
    # The loss shifts by one: position 0 is never a target, whatever its label says.
    assert role_of(0, 5, True, -100) == "ignored"
    assert role_of(1, 5, True, -100) == "supervised"
    assert role_of(3, -100, True, -100) == "ignored"
    assert role_of(3, -100, False, -100) == "padding"
    assert role_of(3, 0, False, -100) == "supervised"  # a labelled pad is what the loss sees


def test_render_marks_each_role():
    tokens = [
        {"piece": p, "role": r}
        for p, r in [
            ("<bos>", "ignored"),
            ("a", "ignored"),
            ("b", "supervised"),
            ("c", "supervised"),
            ("<pad>", "padding"),
            ("<pad>", "padding"),
            ("d", "cut"),
            ("<eos>", "cut"),
        ]
    ]
    assert render(tokens) == "<bos>a[bc]··✂(d<eos>)"


def test_pick_shown_puts_the_first_offenders_on_screen():
    assert pick_shown([1, 2, 3, 4, 5], [], 4) == [1, 2, 3, 4]
    assert pick_shown([1, 2, 3, 4, 5], [9, 2, 8, 9], 4) == [1, 2, 9, 8]
    assert pick_shown([1, 2], [7, 8, 9], 2) == [7, 8]


# ------------------------------------------------------------------------------------------ prompt supervision


def test_prompt_supervision_checked_both_ways():
    masked = demo_instruct.make_task(n_conversations=40)
    unmasked = demo_instruct.make_task(n_conversations=40, mask_prompt=False)
    result, checks = inspect(masked, supervise_prompt=True)
    assert result.verdict == FAIL and checks["prompt_supervision"]["verdict"] == FAIL
    assert checks["prompt_supervision"]["count"] == len(masked.examples)
    assert "no supervised prompt token but the campaign declares supervise_prompt = true" in result.reason
    result, checks = inspect(unmasked, supervise_prompt=True)
    assert result.verdict == PASS, result.reason


def test_without_prompt_lengths_labels_copying_inputs_still_fail():
    unmasked = without_lengths(demo_instruct.make_task(n_conversations=40, mask_prompt=False))
    result, checks = inspect(unmasked)
    assert checks["prompt_supervision"]["verdict"] == FAIL
    assert "labels identical to input_ids" in checks["prompt_supervision"]["message"]
    assert result.details["prompt_known"] is False
    assert all("prompt_supervised" not in e for e in result.details["examples"])
    masked = without_lengths(demo_instruct.make_task(n_conversations=40))
    assert inspect(masked)[0].verdict == PASS


def test_raw_lengths_come_from_an_untruncated_collate_when_the_task_gives_none():
    task = demo_instruct.make_task(n_conversations=40)
    with_keys, _ = inspect(task, max_length=16)
    without, _ = inspect(without_lengths(task), max_length=16)
    for key in ("responses_cut", "zero_supervised", "raw_length_max", "supervised_tokens"):
        assert with_keys.details[key] == without.details[key], key
    assert with_keys.details["responses_cut"] > 0


# ------------------------------------------------------------------------------------------ classification


def test_no_class_names_at_all_warns_that_the_mapping_is_unchecked():
    task = demo_classify.make_task(n_sources=20, class_names=[])
    result, checks = inspect(task)
    assert result.verdict == WARN
    assert checks["label_range"]["verdict"] == WARN
    assert "label_meaning" not in checks  # nothing to compare the meanings with


def test_shuffled_declared_names_list_the_first_mismatching_ids():
    task = demo_classify.make_task(n_sources=20)
    declared = ["circle", "triangle", "square", "star"]
    result, checks = inspect(task, declared_names=declared)
    assert result.verdict == FAIL
    meaning = checks["label_meaning"]
    assert meaning["verdict"] == FAIL
    wrong = [ex["id"] for ex in task.examples if declared[ex["label"]] != ex["label_name"]]
    assert meaning["count"] == len(wrong) and meaning["ids"] == wrong[:10]
    assert "id 1 is named 'triangle' but its examples are 'square'" in meaning["message"]
    assert "the data says 0=circle, 1=square, 2=triangle, 3=star" in meaning["message"]


# ------------------------------------------------------------------------------------------ splits


def test_an_example_in_two_splits_and_an_empty_validation_fail():
    task = demo_instruct.make_task(n_conversations=40)
    good = splits_of(task)
    twice = {k: list(v) for k, v in good.items()} | {"test": [*good["test"], good["train"][0]]}
    result = check_splits(task.examples, twice, group_key="conversation")
    verdicts = {c["name"]: c["verdict"] for c in result.details["checks"]}
    assert verdicts["coverage"] == FAIL and verdicts["groups"] == FAIL
    empty = {"train": good["train"] + good["validation"], "validation": [], "test": good["test"]}
    result = check_splits(task.examples, empty, group_key="conversation")
    assert result.verdict == FAIL and "the validation split is empty" in result.reason


def test_examples_in_no_split_warn():
    task = demo_instruct.make_task(n_conversations=40)
    good = splits_of(task)
    partial = good | {"test": good["test"][1:]}
    result = check_splits(task.examples, partial, group_key="conversation")
    assert result.verdict == WARN and "1 of" in result.reason


def test_a_split_that_is_not_reproducible_fails():
    task = demo_instruct.make_task(n_conversations=40)
    ours = splits_of(task)
    other = group_split(task.examples, "conversation", RATIOS, 1)
    assert other != ours
    assert check_splits(task.examples, ours, group_key="conversation", expected=ours).verdict == PASS
    result = check_splits(task.examples, ours, group_key="conversation", expected=other)
    assert result.verdict == FAIL and "another split" in result.reason


def test_identical_means_identical_after_normalising_case_and_spaces():
    a = {"id": "x1", "conversation": "c1", "prompt": "rev:abc", "response": "cba"}
    b = {"response": "CBA ", "prompt": " Rev:abc\n", "conversation": "c2", "id": "x2"}
    identity = ("id", "conversation")
    assert input_hash(a, identity) == input_hash(b, identity)
    assert input_hash(a, identity) != input_hash(a | {"response": "cab"}, identity)
    examples = [a, b, a | {"id": "x3", "conversation": "c3", "prompt": "up:abc"}]
    result = check_splits(
        examples, {"train": [0, 2], "validation": [1], "test": []}, group_key="conversation"
    )
    assert result.verdict == FAIL and result.details["duplicates"][0]["ids"] == ["x1", "x2"]


@pytest.mark.parametrize(
    ("train", "validation", "verdict"),
    [([1, 2, 9], [10, 11], PASS), ([1, 2, 10], [9, 11], WARN)],
)
def test_time_periods_compare_as_numbers_when_they_are(train, validation, verdict):
    # As text "10" < "9": the order must be read as numbers.
    examples = [{"period": p} for p in train + validation]
    splits = {"train": list(range(len(train))), "validation": list(range(len(train), len(examples)))}
    check, order = time_order(examples, splits, "period")
    assert check.verdict == verdict
    assert order["train_last"] == str(max(train))  # as written in the data


def test_failures_come_first_in_the_reason():
    checks = [Check("a", WARN, "careful"), Check("b", PASS, "fine"), Check("c", FAIL, "broken")]
    assert verdict_of(checks) == (FAIL, "broken; careful")
    assert verdict_of(checks[:2]) == (WARN, "careful")
    assert verdict_of(checks[1:2]) == (PASS, "all checks passed")
