"""What real models broke, each fix checked on its own: reasons keep the first
non-empty line, the overfit gate knows what a subset allows, a wrong logits shape names the
forward, fit_search shows no length where none applies, the demo campaigns ship in the package."""

from __future__ import annotations

import math

import pytest
import torch

from pilot_tui.core.reasons import exception_line, first_line
from pilot_tui.runner.checks import objective
from pilot_tui.runner.checks.achievable import achievable, still_improving
from pilot_tui.runner.phases.fit_search import at_length, point_label
from pilot_tui.tasks.contract import CAUSAL_LM, CLASSIFICATION, Task


def test_reasons_keep_the_first_non_empty_line():
    exc = RuntimeError("\n  Some tensors share memory, this will lead to duplicate memory on disk\nA list")
    assert (
        exception_line(exc)
        == "RuntimeError: Some tensors share memory, this will lead to duplicate memory on disk"
    )
    assert exception_line(ValueError("")) == "ValueError"
    assert first_line("\n\n  \nsecond\nthird") == "second"


def _lm_task(forward=None) -> Task:
    return Task(
        "t", CAUSAL_LM, [{"group": "a"}], lambda: torch.nn.Identity(), lambda e, n: {}, forward=forward
    )


def test_achievable_recovery_counts_identical_contexts_with_different_labels():
    task = _lm_task()
    # Two rows share the prefix [5, 6] and then disagree: one of the two targets cannot be right.
    ids = torch.tensor([[5, 6, 7, 1], [5, 6, 8, 2]])
    labels = torch.tensor([[-100, -100, 7, 1], [-100, -100, 8, 2]])
    got = achievable(task, [{"input_ids": ids, "labels": labels}])
    assert got.targets == 4 and got.ambiguous == 2
    assert got.recovery == pytest.approx(3 / 4)
    assert got.min_loss == pytest.approx(2 * math.log(2) / 4)
    distinct = achievable(task, [{"input_ids": ids, "labels": torch.where(ids == 8, -100, labels)}])
    assert distinct.recovery == 1.0 and distinct.min_loss == 0.0
    classes = Task("c", CLASSIFICATION, [{"group": "a"}], lambda: torch.nn.Identity(), lambda e, n: {})
    features = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]])
    same_input = achievable(classes, [{"features": features, "labels": torch.tensor([0, 1, 1])}])
    assert same_input.recovery == pytest.approx(2 / 3)


def test_still_improving_reads_the_end_of_the_curve():
    assert still_improving([1.0 / (k + 1) for k in range(100)])
    assert not still_improving([1.0] * 50 + [0.5] * 50)


def test_a_wrong_logits_shape_names_the_tasks_forward():
    def last_position_only(model, batch):
        return model(batch["input_ids"])[:, -1:]

    task = _lm_task(forward=last_position_only)
    batch = {"input_ids": torch.zeros(2, 8, dtype=torch.long), "labels": torch.zeros(2, 8, dtype=torch.long)}
    with pytest.raises(
        ValueError,
        match=r"task's forward .*last_position_only .*test_runner_helpers.py:\d+\) returned logits of shape \[2, 1, 5\] for labels of shape \[2, 8\]",
    ):
        objective.loss_sum(task, torch.zeros(2, 1, 5), batch)
    objective.loss_sum(task, torch.zeros(2, 8, 5), batch)  # the right shape passes


def test_fit_search_shows_no_max_length_where_none_applies():
    assert point_label(8, 0) == "mb 8" and at_length(0) == ""
    assert point_label(8, 128) == "mb 8 len 128" and at_length(128) == " at max length 128"
