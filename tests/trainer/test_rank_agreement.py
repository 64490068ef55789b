"""What the ranks of a distributed trainer campaign must agree on: the digests each rank gathers
of its datasets (rows and their order) and of its captured weights, and the sentence naming
the ranks that differ."""

from __future__ import annotations

import torch
from datasets import Dataset

from pilot_tui.runner.subject.trainer.adapter import Rows
from pilot_tui.runner.subject.trainer.ranks import disagreement, rows_digest, weights_digest


def _rows(ids: list[list[int]]) -> Rows:
    return Rows(Dataset.from_dict({"input_ids": ids, "labels": ids}), collate_fn=None)


def test_the_same_rows_in_the_same_order_agree():
    a, b = _rows([[1, 2], [3, 4, 5]]), _rows([[1, 2], [3, 4, 5]])
    assert rows_digest(a) == rows_digest(b)
    # The sampler deals indices out to the ranks: another order is another dataset.
    assert rows_digest(_rows([[3, 4, 5], [1, 2]])) != rows_digest(a)
    assert rows_digest(_rows([[1, 2], [3, 4, 6]])) != rows_digest(a)
    assert rows_digest(None) == "-"


def test_a_tensor_row_is_hashed_whole():
    # repr() elides a long tensor's middle: two rows differing there must still differ.
    x = torch.arange(5000)
    y = x.clone()
    y[2500] = -1
    assert rows_digest(Rows([{"input_ids": x}], None)) != rows_digest(Rows([{"input_ids": y}], None))


def _digests(weights: str = "w", **datasets: str) -> dict:
    return {"datasets": {"train_dataset": "t", "eval_dataset": "e"} | datasets, "weights": weights}


def test_a_rank_with_another_split_is_named():
    assert disagreement([_digests(), _digests()]) == ("", [])
    every = [_digests(), _digests(train_dataset="x", eval_dataset="y"), _digests(eval_dataset="z")]
    problem, weights = disagreement(every)
    assert problem.startswith("rank 1, 2 built another train_dataset and eval_dataset than rank 0")
    assert "seeded per rank" in problem and weights == []
    # An eval set of a dict, named as the script named it; a set one rank lacks differs too.
    named = {"eval_dataset['b']": "b"}
    problem, _ = disagreement([_digests(**named), _digests()])
    assert problem.startswith("rank 1 built another eval_dataset['b'] than rank 0")


def test_other_weights_are_not_a_failure_but_are_named():
    assert disagreement([_digests(), _digests(weights="v")]) == ("", [1])
    w = {"a": torch.ones(3), "b": torch.zeros(2)}
    assert weights_digest(w) == weights_digest({k: v.clone() for k, v in w.items()})
    assert weights_digest(w) != weights_digest(w | {"b": torch.ones(2)})
    # bf16 weights and a 0-d buffer are hashed too.
    odd = {"h": torch.ones(2, dtype=torch.bfloat16), "scale": torch.tensor(2.0)}
    assert weights_digest(odd) != weights_digest(odd | {"scale": torch.tensor(3.0)})
