"""Properties of the group split (R4): whole groups, every example once, deterministic, no empty
split while there are groups enough, ratios met, and time periods kept in time order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pilot_tui.analysis.leakage import check_splits
from pilot_tui.analysis.splits import SPLITS, group_split

RATIOS = st.sampled_from(
    [
        {"train": 0.8, "validation": 0.1, "test": 0.1},
        {"train": 0.7, "validation": 0.15, "test": 0.15},
        {"train": 0.5, "validation": 0.5, "test": 0.0},
        {"train": 0.34, "validation": 0.33, "test": 0.33},
    ]
)
# Group sizes: how many examples each group holds (one group per entry).
GROUP_SIZES = st.lists(st.integers(1, 6), min_size=1, max_size=60)


def examples_of(sizes: list[int]) -> list[dict]:
    return [{"id": f"{g}-{k}", "g": f"grp{g}"} for g, size in enumerate(sizes) for k in range(size)]


@settings(max_examples=150, deadline=None)
@given(sizes=GROUP_SIZES, ratios=RATIOS, seed=st.integers(0, 2**31))
def test_group_split_properties(sizes, ratios, seed):
    examples = examples_of(sizes)
    out = group_split(examples, "g", ratios, seed)
    assert set(out) == set(SPLITS)
    # Every example in exactly one split.
    flat = [i for s in SPLITS for i in out[s]]
    assert sorted(flat) == list(range(len(examples)))
    # No group in two splits.
    home = {}
    for s in SPLITS:
        for i in out[s]:
            assert home.setdefault(examples[i]["g"], s) == s
    # Deterministic: the same seed gives the same split.
    assert group_split(examples, "g", ratios, seed) == out
    wanted = [s for s in SPLITS if ratios[s] > 0]
    assert all(not out[s] for s in SPLITS if s not in wanted)
    if len(sizes) >= len(wanted):
        assert all(out[s] for s in wanted), {s: len(out[s]) for s in SPLITS}
    # Train gets at least its share unless the later splits needed the remaining groups.
    if len(sizes) >= 4 * len(wanted):
        assert len(out["train"]) >= ratios["train"] * len(examples) or all(
            len({examples[i]["g"] for i in out[s]}) == 1 for s in wanted[1:]
        )


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=3, max_size=30), seed=st.integers(0, 100))
def test_the_seed_moves_groups_not_examples(sizes, seed):
    examples = examples_of(sizes)
    ratios = {"train": 0.8, "validation": 0.1, "test": 0.1}
    a, b = group_split(examples, "g", ratios, seed), group_split(examples, "g", ratios, seed + 1)
    assert sorted(i for s in SPLITS for i in a[s]) == sorted(i for s in SPLITS for i in b[s])


def test_numeric_periods_split_in_time_order_not_text_order():
    # Months 1..12 as numbers: sorted as text, month 10 would land in train before month 2.
    examples = [{"id": str(m), "month": m, "text": f"report {m}"} for m in range(1, 13)]
    ratios = {"train": 0.7, "validation": 0.15, "test": 0.15}
    out = group_split(examples, "month", ratios, 0, by_time=True)
    months = {s: [examples[i]["month"] for i in out[s]] for s in SPLITS}
    assert max(months["train"]) < min(months["validation"]) <= max(months["validation"]) < min(months["test"])
    result = check_splits(examples, out, group_key="month", group_kind="time", ratios=ratios)
    assert result.verdict == "pass", result.reason


def test_text_periods_keep_text_order():
    examples = [{"id": str(i), "day": f"2025-01-{d:02d}"} for i, d in enumerate(range(31, 0, -1))]
    out = group_split(examples, "day", {"train": 0.8, "validation": 0.1, "test": 0.1}, 0, by_time=True)
    days = {s: sorted(examples[i]["day"] for i in out[s]) for s in SPLITS}
    assert days["train"][-1] < days["validation"][0] and days["validation"][-1] < days["test"][0]
