"""The LR board's pure bookkeeping and comparison: ids, retries, and when a winner may be named."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pilot_tui.analysis.board import (
    compare,
    difference,
    next_attempt,
    parse_run_name,
    select_runs,
    split_run_id,
    unique_run,
)
from pilot_tui.core.phase_table import lr_run_name

CONTROL, LOW, HIGH = 1e-4, 5e-5, 2e-4


def run(lr: float, seed: int, final: float, status: str = "completed", attempt: int = 1, **extra) -> dict:
    return {
        "id": f"{lr_run_name(lr, seed)}-{attempt}",
        "lr": lr,
        "seed": seed,
        "status": status,
        "final_validation": final,
        "best_validation": final,
    } | extra


def board_of(finals: dict[float, list[float]], **kw) -> dict:
    runs = [run(lr, seed, v) for lr, values in finals.items() for seed, v in enumerate(values)]
    return compare(runs, CONTROL, [CONTROL, LOW, HIGH], **kw)


def rows(board: dict) -> dict[float, dict]:
    return {r["lr"]: r for r in board["lrs"]}


# ------------------------------------------------------------------ names and ids


@given(
    mantissa=st.integers(1, 99_999),
    exponent=st.integers(-12, 3),
    seed=st.integers(-5, 10_000),
)
def test_run_names_round_trip(mantissa, exponent, seed):
    lr = float(f"{mantissa}e{exponent}")
    name = lr_run_name(lr, seed)
    assert parse_run_name(name) == (float(f"{lr:e}"), seed)
    assert lr_run_name(*parse_run_name(name)) == name


@pytest.mark.parametrize("name", ["control", "lr1e-4", "lr1e-4-s", "lrx-s0", "lr10e-5-s0", "lr1e-4-s0-1"])
def test_bad_run_names_are_refused(name):
    with pytest.raises(ValueError):
        parse_run_name(name)


def test_attempts_are_never_reused():
    assert next_attempt([], "lr1e-4-s0") == (1, "")
    runs = [{"id": "lr1e-4-s0-1"}, {"id": "lr1e-4-s0-3"}, {"id": "lr2e-4-s0-7"}, {"id": "odd"}]
    # One past the highest ever used, even with a gap; the retry points at that highest one.
    assert next_attempt(runs, "lr1e-4-s0") == (4, "lr1e-4-s0-3")
    assert next_attempt(runs, "lr2e-4-s0") == (8, "lr2e-4-s0-7")
    assert split_run_id("lr1e-4-s0-12") == ("lr1e-4-s0", 12)
    with pytest.raises(ValueError):
        split_run_id("lr1e-4-s0")


def test_a_taken_id_is_never_written_twice():
    runs = [{"id": "lr1e-4-s0-1", "status": "diverged"}]
    fresh = unique_run(runs, {"id": "lr1e-4-s0-2", "status": "completed"})
    assert fresh == {"id": "lr1e-4-s0-2", "status": "completed"}
    clash = unique_run(runs, {"id": "lr1e-4-s0-1", "status": "completed"})
    assert clash["id"] == "lr1e-4-s0-2" and clash["id_conflict"] == "lr1e-4-s0-1"
    assert runs == [{"id": "lr1e-4-s0-1", "status": "diverged"}]


def test_the_latest_measured_attempt_counts_never_the_best():
    runs = [
        run(CONTROL, 0, 1.0, attempt=1),
        run(CONTROL, 0, 2.0, attempt=2),  # worse, but later: this one counts
        run(CONTROL, 0, 0.1, status="failed", attempt=3),  # measured nothing about the LR
        run(CONTROL, 0, 0.1, status="cancelled", attempt=4),
    ]
    assert select_runs(runs)[(CONTROL, 0)].id == "lr1e-4-s0-2"


# ------------------------------------------------------------------ comparison


def test_seeds_that_disagree_on_the_ranking_give_no_reliable_difference():
    # Seed 0: HIGH beats the control; seed 1: the control beats HIGH. Means still differ.
    b = board_of({CONTROL: [1.00, 0.90], HIGH: [0.80, 0.95], LOW: [1.20, 1.10]})
    high = rows(b)[HIGH]
    assert high["same_sign"] is False and high["reliable"] is False
    assert high["vs_control"] == "no reliable difference"
    assert b["ranking_holds"] is False
    assert "winner" not in b
    assert "no reliable difference" in b["decision"] and "stays the reference" in b["decision"]


def test_a_gap_within_the_seed_spread_is_no_reliable_difference():
    # HIGH is lower on both seeds, but by 0.05 while the seeds spread by 0.5.
    b = board_of({CONTROL: [1.00, 1.50], HIGH: [0.95, 1.45]})
    high = rows(b)[HIGH]
    assert high["same_sign"] is True
    assert high["spread"] == pytest.approx(0.5) and abs(high["gap_to_control"]) < high["spread"]
    assert high["vs_control"] == "no reliable difference" and "winner" not in b


def test_a_consistent_gap_beyond_the_spread_names_a_winner():
    b = board_of({CONTROL: [1.00, 1.05], HIGH: [0.50, 0.52], LOW: [1.50, 1.55]})
    r = rows(b)
    assert r[HIGH]["vs_control"] == "better" and r[HIGH]["reliable"] is True
    assert r[LOW]["vs_control"] == "worse" and r[LOW]["reliable"] is True
    assert b["ranking"] == [HIGH, CONTROL, LOW] and b["ranking_holds"] is True
    assert b["winner"] == HIGH == b["leader"]
    assert r[HIGH]["final_mean"] == pytest.approx(0.51)
    assert (r[HIGH]["final_min"], r[HIGH]["final_max"]) == (0.50, 0.52)
    assert r[HIGH]["final_std"] == pytest.approx(math.sqrt(2) * 0.01)


def test_the_control_can_remain_the_best_choice():
    b = board_of({CONTROL: [0.50, 0.52], HIGH: [1.00, 1.05], LOW: [1.50, 1.55]})
    assert b["winner"] == CONTROL
    assert "control" in b["decision"] and "remains the best" in b["decision"]


def test_one_seed_gives_a_direction_but_never_a_winner():
    b = board_of({CONTROL: [1.0], HIGH: [0.5], LOW: [1.5]})
    r = rows(b)
    assert (r[HIGH]["vs_control"], r[HIGH]["reliable"], r[HIGH]["seeds_compared"]) == ("better", False, 1)
    assert "spread" not in r[HIGH]
    assert b["leader"] == HIGH and "winner" not in b
    assert "add seeds" in b["decision"]


def test_a_diverged_lr_keeps_its_row_but_is_never_ranked():
    runs = [
        run(CONTROL, 0, 1.0),
        run(CONTROL, 1, 1.1),
        run(HIGH, 0, float("nan"), status="diverged"),
        run(HIGH, 1, 0.2),
        run(LOW, 0, 0.9, status="stopped"),  # a plateau stop still has a measured validation
    ]
    b = compare(runs, CONTROL, [CONTROL, LOW, HIGH])
    r = rows(b)
    assert r[HIGH]["vs_control"] == "diverged" and r[HIGH]["diverged_seeds"] == [0]
    assert HIGH not in b["ranking"] and b["diverged"] == [HIGH]
    assert r[LOW]["final_mean"] == 0.9


def test_a_declared_lr_without_runs_shows_as_missing():
    b = compare([run(CONTROL, 0, 1.0)], CONTROL, [CONTROL, HIGH])
    assert rows(b)[HIGH]["vs_control"] == "missing" and rows(b)[HIGH]["runs"] == []
    assert "winner" not in b


def test_difference_is_measured_on_common_seeds_only():
    d = difference({0: 1.0, 1: 2.0, 2: 9.0}, {0: 1.5, 1: 2.5})
    assert d["seeds_compared"] == 2 and d["gap"] == pytest.approx(-0.5)
    assert d["spread"] == pytest.approx(1.0) and d["reliable"] is False


def test_a_winner_named_before_every_declared_lr_ran_says_which_are_missing():
    runs = [run(CONTROL, s, v) for s, v in enumerate([1.00, 1.05])]
    runs += [run(HIGH, s, v) for s, v in enumerate([0.50, 0.52])]
    b = compare(runs, CONTROL, [CONTROL, LOW, HIGH])
    assert b["winner"] == HIGH
    assert b["decision"].endswith(f"(not measured yet: lr {LOW:g})")
    runs += [run(LOW, s, v) for s, v in enumerate([1.50, 1.55])]
    assert "not measured yet" not in compare(runs, CONTROL, [CONTROL, LOW, HIGH])["decision"]
