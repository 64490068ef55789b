"""Per-rank data: the split every rank builds, and the sampler's shares per epoch."""

import random

from pilot_tui.analysis.rank_data import sampler_problems, split_digest, split_mismatch


def _splits(seed):
    """What a task that shuffles its examples without a seed gives each process: another split."""
    ids = [f"e{i}" for i in range(20)]
    order = list(range(20))
    random.Random(seed).shuffle(order)
    return {"train": order[:16], "validation": order[16:18], "test": order[18:]}, ids


def test_a_rank_with_another_split_is_named_and_equal_splits_pass():
    same, ids = _splits(0)
    reordered = {k: list(reversed(v)) for k, v in same.items()}  # order inside a split is not a split
    assert split_digest(same, ids) == split_digest(reordered, ids)
    digests = [split_digest(_splits(s)[0], ids) for s in (0, 0, 1, 0)]
    assert split_mismatch(digests).startswith("rank 2 sees another train / validation / test split")
    assert split_mismatch([split_digest(same, ids)] * 4) == ""


def test_a_sampler_without_set_epoch_or_overlapping_shares_is_said_so():
    good = [[[0, 3], [1, 2]], [[2, 1], [0, 3]]]
    assert sampler_problems(good) == ""
    assert "not set (DistributedSampler.set_epoch)" in sampler_problems([[[0, 3], [1, 2]], [[0, 3], [1, 2]]])
    assert "not a partition" in sampler_problems([[[0, 1], [1, 2]]])
