"""The steady phase's confidence interval and the plan's range, on step times drawn the way a
shared machine produces them: independent noise, and bursts where another process holds a core."""

from __future__ import annotations

import math
import random

import pytest

from pilot_tui.analysis.step_time import (
    BLOCKS,
    MIN_WINDOWS,
    mean_interval,
    pilot_speeds,
    run_spread,
    speed_moved,
    step_range,
    t975,
    updates_needed,
    window_half_width,
)


def iid(rng: random.Random, n: int, mean: float = 0.01, sd: float = 0.002) -> list[float]:
    return [max(1e-6, rng.gauss(mean, sd)) for _ in range(n)]


def bursty(rng: random.Random, n: int, mean: float = 0.01) -> list[float]:
    """Runs of ~40 updates slowed 1.5× by another process, then quiet again: autocorrelated."""
    out, slow = [], False
    while len(out) < n:
        slow = rng.random() < 0.3
        factor = 1.5 if slow else 1.0
        out.extend(max(1e-6, rng.gauss(mean * factor, mean * 0.05)) for _ in range(40))
    return out[:n]


def true_mean_bursty(mean: float = 0.01) -> float:
    return mean * (0.7 + 0.3 * 1.5)


def coverage(draw, truth: float, n: int, trials: int = 300, naive: bool = False) -> float:
    rng = random.Random(7)
    hits = 0
    for _ in range(trials):
        times = draw(rng, n)
        iv = mean_interval(times, blocks=n if naive else BLOCKS)
        hits += abs(iv.mean_s - truth) <= iv.ci95_s
    return hits / trials


def test_the_t_quantile_matches_the_table_and_the_normal_limit():
    assert t975(1) == pytest.approx(12.706) and t975(19) == pytest.approx(2.093)
    assert t975(60) == pytest.approx(2.000, abs=2e-3) and t975(1000) == pytest.approx(1.962, abs=2e-3)
    assert t975(0) == math.inf


def test_independent_times_are_covered_about_95_percent_of_the_time():
    for n in (12, 200):  # per update, then batch means
        assert 0.9 <= coverage(iid, 0.01, n) <= 0.99, n


def test_bursts_are_covered_by_block_means_where_a_per_update_interval_is_far_too_narrow():
    blocks = coverage(bursty, true_mean_bursty(), 800)
    naive = coverage(bursty, true_mean_bursty(), 800, naive=True)
    assert blocks >= 0.85, blocks
    assert naive < 0.6, naive  # the failure the block means exist for
    assert mean_interval(bursty(random.Random(1), 800)).method == f"{BLOCKS} blocks"


def test_precision_and_the_updates_it_still_needs():
    assert math.isinf(mean_interval([]).precision) and math.isinf(mean_interval([0.1]).precision)
    iv = mean_interval(iid(random.Random(3), 40, sd=0.004))
    assert iv.n == 40 and iv.precision == pytest.approx(iv.ci95_s / iv.mean_s)
    need = updates_needed(iv, iv.precision / 2)
    assert need == pytest.approx(4 * 40, rel=0.01)  # half the width: four times the updates
    assert updates_needed(iv, 1.0) == 40


def details(**changes):
    base = {
        "step_s_mean": 0.1,
        "step_s_ci95": 0.002,
        "timed_updates": 120,
        "step_s_precision_target": 0.03,
        "timing_clock": "host",
        "runqueue_share": 0.0,
    }
    return base | changes


def test_a_quiet_cpu_range_is_the_interval():
    r = step_range(details())
    assert r is not None
    assert (r.low_s, r.mean_s, r.high_s) == pytest.approx((0.098, 0.1, 0.102))
    assert "±2.0% at 95 % confidence over 120 timed updates" in r.caveat
    assert "waited for a CPU" not in r.caveat


def test_contention_widens_the_range_from_an_idle_machine_to_one_twice_as_busy():
    r = step_range(details(runqueue_share=0.25))
    assert r is not None
    assert r.low_s == pytest.approx(0.098 * 0.75) and r.high_s == pytest.approx(0.102 * 1.25)
    assert "waited for a CPU 25% of its time" in r.caveat
    # On a GPU the device's own clock timed it: host contention does not widen it.
    gpu = step_range(details(runqueue_share=0.25, timing_clock="cuda events"))
    assert gpu is not None and gpu.high_s == pytest.approx(0.102)


def test_a_machine_whose_speed_moved_while_timed_widens_the_range_to_both_speeds():
    # The reference workload took 2.0 ms before the loop and 3.0 ms after: the host slowed the
    # machine by half, unseen by the run queue (share 0).
    r = step_range(details(speed_reference_s=[0.002, 0.003]))
    assert r is not None and r.speed_moved == pytest.approx(0.5)
    assert r.low_s == pytest.approx(0.098 / 1.5) and r.high_s == pytest.approx(0.102 * 1.5)
    assert "speed moved 50% while steady was timed" in r.caveat
    # Below the reference's own noise nothing moves; on a GPU the device's clock timed it.
    quiet = step_range(details(speed_reference_s=[0.002, 0.00215]))
    gpu = step_range(details(speed_reference_s=[0.002, 0.003], timing_clock="cuda events"))
    for same in (quiet, gpu):
        assert same is not None and (same.low_s, same.high_s) == pytest.approx((0.098, 0.102))
        assert "speed moved" not in same.caveat


def test_a_hostile_speed_reference_moves_nothing():
    for bad in ("0.002,0.003", [0.002], [0.0, 0.003], [-1.0, 0.003], ["0.002", 0.003], 7, None):
        assert speed_moved(bad) == 0.0
    r = step_range(details(speed_reference_s=[0.002, math.inf, 0.003]))
    assert r is not None and r.speed_moved == pytest.approx(0.5)  # the finite two still count


def test_the_pilots_own_loop_lowers_the_low_end_only():
    # 4 % of each timed update was the pilot's loop around the model: a plain loop may skip it.
    r = step_range(details(loop_own_share=0.04))
    assert r is not None
    assert r.low_s == pytest.approx(0.098 * 0.96) and r.high_s == pytest.approx(0.102)
    assert "4.0% of each timed update was the pilot's own loop" in r.caveat
    # A share too small to matter is not worth a clause; on a GPU the host's stamps time launches.
    small = step_range(details(loop_own_share=0.001))
    assert small is not None and "pilot's own loop" not in small.caveat
    gpu = step_range(details(loop_own_share=0.04, timing_clock="cuda events"))
    assert gpu is not None and gpu.low_s == pytest.approx(0.098)


def test_a_hostile_own_share_is_ignored_or_bounded():
    for bad in ("0.04", -0.5, math.nan, math.inf, None, [0.04]):
        r = step_range(details(loop_own_share=bad))
        assert r is not None and r.low_s == pytest.approx(0.098), bad
    # A damaged record claiming the loop was all bookkeeping lowers the low end by half at most.
    r = step_range(details(loop_own_share=5.0))
    assert r is not None and r.low_s == pytest.approx(0.098 * 0.5)


def test_a_budget_that_ended_short_of_the_target_says_so():
    r = step_range(details(step_s_ci95=0.006))
    assert r is not None and "short of the ±3% target" in r.caveat
    budget = step_range(details(step_s_ci95=0.006, timing_stopped="budget"))
    assert budget is not None and "timing stopped at its time budget" in budget.caveat
    # A trainer script's run that ended first is not called a budget.
    ended = step_range(details(step_s_ci95=0.006, timing_stopped="max_steps"))
    assert ended is not None and "the end of the script's own run" in ended.caveat
    assert "budget" not in ended.caveat


def test_records_made_before_have_no_range():
    assert step_range({"step_time_s": 0.1, "step_time_p10_s": 0.09, "step_time_p90_s": 0.12}) is None
    assert step_range(details(step_s_ci95=-1.0)) is None  # one timed update: no interval
    assert step_range(details(step_s_mean="0.1")) is None  # a hostile record: not a number


def test_a_short_runs_range_holds_its_own_mean_not_only_the_pilots():
    """A run of N updates has a mean of its own that varies: its range must hold that mean about
    95 % of the time, which the interval of the pilot's mean alone does not."""
    rng = random.Random(11)
    held_run = held_mean = trials = 0
    for _ in range(300):
        pilot = iid(rng, 120)
        iv = mean_interval(pilot)
        d = details(step_s_mean=iv.mean_s, step_s_ci95=iv.ci95_s, timed_updates=iv.n)
        run = step_range(d, updates=40)
        mean_only = step_range(d)
        assert run is not None and mean_only is not None
        future = sum(iid(rng, 40)) / 40
        held_run += run.low_s <= future <= run.high_s
        held_mean += mean_only.low_s <= future <= mean_only.high_s
        trials += 1
    assert held_run / trials >= 0.92
    assert held_mean / trials <= 0.75  # ±ci alone is for the mean, and too narrow for 40 updates
    assert "for a run of 40 updates" in run.caveat


def test_a_long_runs_range_is_the_interval_of_the_mean():
    d = details()
    long = step_range(d, updates=10_000_000)
    assert long is not None and (long.low_s, long.high_s) == pytest.approx((0.098, 0.102), rel=1e-4)
    assert "for a run of" not in long.caveat
    short = step_range(d, updates=120)  # as long as the timing: √2 wider
    assert short is not None and short.high_s - 0.1 == pytest.approx(0.002 * math.sqrt(2))
    assert f"±{0.02 * math.sqrt(2):.1%} for a run of 120 updates" in short.caveat


def drifting(rng: random.Random, start: float, n: int, amp: float = 0.06, mean: float = 0.01) -> list[float]:
    """A machine whose speed drifts ±`amp` over 160 updates, with 3 % noise on every update."""
    return [
        max(1e-6, mean * (1 + amp * math.sin(2 * math.pi * (start + i) / 160)) * (1 + rng.gauss(0, 0.03)))
        for i in range(n)
    ]


def test_a_short_runs_range_holds_the_drift_that_stretches_of_its_length_show():
    """Blocks a tenth of a run long see the updates' noise, not a drift as slow as the run: the
    run's range from them misses its mean. Five timed stretches of the run's length show it."""
    rng = random.Random(5)
    held_blocks = held_windows = 0
    trials = 300
    for _ in range(trials):
        pilot = drifting(rng, rng.uniform(0, 1000), 200)
        iv = mean_interval(pilot)
        d = details(step_s_mean=iv.mean_s, step_s_ci95=iv.ci95_s, timed_updates=iv.n)
        blocks = step_range(d, updates=40)
        windows = step_range(d | {"step_times_s": pilot}, updates=40)
        assert blocks is not None and windows is not None
        future = sum(drifting(rng, rng.uniform(0, 1000), 40)) / 40  # the run, later
        held_blocks += blocks.low_s <= future <= blocks.high_s
        held_windows += windows.low_s <= future <= windows.high_s
    assert held_blocks / trials <= 0.85
    assert held_windows / trials >= 0.95
    assert "the means of 5 timed stretches of 40 updates each" in windows.caveat


def test_a_variant_timed_to_its_precision_borrows_the_controls_drift_over_the_run():
    """The memory variants stop at their precision, leaving the stretches to the control: the
    drift a run that long shows is the machine's, so their ranges hold the same share of it."""
    rng = random.Random(5)
    held_alone = held_borrowed = 0
    trials = 300
    for _ in range(trials):
        control = drifting(rng, rng.uniform(0, 1000), 200)
        spread = run_spread(details(step_s_mean=sum(control) / 200, step_times_s=control), 40)
        assert spread == pytest.approx(window_half_width(control, 40)[0] / (sum(control) / 200))
        variant = drifting(rng, rng.uniform(0, 1000), 60, mean=0.02)  # twice as slow, timed briefly
        iv = mean_interval(variant)
        d = details(step_s_mean=iv.mean_s, step_s_ci95=iv.ci95_s, timed_updates=iv.n)
        alone, borrowed = step_range(d, updates=40), step_range(d, updates=40, borrowed_spread=spread)
        assert alone is not None and borrowed is not None
        future = sum(drifting(rng, rng.uniform(0, 1000), 40, mean=0.02)) / 40
        held_alone += alone.low_s <= future <= alone.high_s
        held_borrowed += borrowed.low_s <= future <= borrowed.high_s
    assert held_borrowed / trials >= 0.95 > held_alone / trials
    assert "the control's timed stretches of that length" in borrowed.caveat


def test_a_variant_timed_only_to_half_the_borrowed_spread_still_holds_the_run():
    """A variant's steady stops once its mean is known to half the control's run spread
    (runner/timing/steady.lent_precision), not to the declared ±1 %: it times far fewer updates,
    its range holds that spread and its own interval together, and that range still holds a
    later run's mean ≥ 95 % of the time."""
    rng = random.Random(7)

    def timed_until(times: list[float], target: float) -> int:
        n = 20
        while n < len(times) and not mean_interval(times[:n]).within(target):
            n += 10
        return n

    held, lent, declared = 0, [], []
    trials = 300
    for _ in range(trials):
        control = drifting(rng, rng.uniform(0, 1000), 200)
        spread = run_spread(details(step_s_mean=sum(control) / 200, step_times_s=control), 40)
        assert spread is not None
        variant = drifting(rng, rng.uniform(0, 1000), 600, mean=0.02)
        n = timed_until(variant, max(0.01, spread / 2))
        lent.append(n)
        declared.append(timed_until(variant, 0.01))
        iv = mean_interval(variant[:n])
        d = details(step_s_mean=iv.mean_s, step_s_ci95=iv.ci95_s, timed_updates=iv.n)
        span = step_range(d, updates=40, borrowed_spread=spread)
        assert span is not None
        assert span.high_s - iv.mean_s >= math.hypot(spread * iv.mean_s, iv.ci95_s) * 0.999
        future = sum(drifting(rng, rng.uniform(0, 1000), 40, mean=0.02)) / 40
        held += span.low_s <= future <= span.high_s
    assert held / trials >= 0.95
    assert sorted(lent)[trials // 2] * 4 <= sorted(declared)[trials // 2]


def test_without_a_drift_the_stretches_widen_a_short_runs_range_little():
    rng = random.Random(6)
    ratios = []
    for _ in range(100):
        pilot = iid(rng, 200)
        iv = mean_interval(pilot)
        d = details(step_s_mean=iv.mean_s, step_s_ci95=iv.ci95_s, timed_updates=iv.n)
        blocks, windows = step_range(d, updates=40), step_range(d | {"step_times_s": pilot}, updates=40)
        assert blocks is not None and windows is not None
        assert windows.high_s - windows.low_s >= blocks.high_s - blocks.low_s  # never narrower
        ratios.append((windows.high_s - windows.low_s) / (blocks.high_s - blocks.low_s))
    assert sorted(ratios)[len(ratios) // 2] < 1.5


def test_stretches_count_only_where_the_timing_holds_several_of_the_run():
    rng = random.Random(7)
    times = iid(rng, 119)
    assert window_half_width(times, 40) is None  # two stretches of 40, fewer than MIN_WINDOWS
    assert window_half_width(times, 39) is not None and window_half_width(times, 39)[1] == MIN_WINDOWS
    assert window_half_width(times, None) is None and window_half_width(times, 1) is None
    # A long run (or none) reads no stretches: its range is the interval's, as before.
    d = details(step_times_s=iid(rng, 120))
    assert step_range(d, updates=10_000_000) == step_range(details(), updates=10_000_000)
    # A hostile record's values are left out, not read as times.
    hostile = details(step_times_s=["0.1", math.nan, -1.0, *iid(rng, 117)])
    assert step_range(hostile, updates=40) == step_range(details(), updates=40)


def test_a_machine_whose_speed_moved_during_the_pilot_widens_the_range_to_every_speed_it_saw():
    # Steady's own reference barely moved; the stack's, at the pilot's start, ran 40 % slower.
    rows = [{"speed_reference_s": [0.0028]}, {"speed_reference_s": [0.002, 0.00205]}, {"loss": 1.0}]
    speeds = pilot_speeds(rows)
    assert speeds == [0.0028, 0.002, 0.00205]
    steady = details(speed_reference_s=[0.002, 0.00205])
    alone = step_range(steady)
    pilot = step_range(steady, speeds=speeds)
    assert alone is not None and pilot is not None
    assert (alone.low_s, alone.high_s) == pytest.approx((0.098, 0.102))
    assert pilot.speed_moved == pytest.approx(0.4)
    assert pilot.high_s == pytest.approx(0.102 * 1.4) and pilot.low_s == pytest.approx(0.098 / 1.4)
    assert "moved 40% during the pilot" in pilot.caveat
    # Hostile values are left out; on a GPU the device clock timed steady: no widening.
    assert pilot_speeds([{"speed_reference_s": "0.002"}, {"speed_reference_s": [math.nan, -1, 0.003]}]) == [
        0.003
    ]
    gpu = step_range(details(timing_clock="cuda events"), speeds=speeds)
    assert gpu is not None and gpu.high_s == pytest.approx(0.102)
