"""Pure comparison math of the memory variants and the fit search (no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot_tui.analysis import variants as v
from pilot_tui.core import phase_table
from pilot_tui.core.rows import PhaseRow
from pilot_tui.core.spec import SpecError, parse_spec
from pilot_tui.core.steps import campaign_steps
from pilot_tui.core.verdict import worst


def _row(name: str, verdict: str = "pass", **memory: float) -> PhaseRow:
    details = {"step_time_s": 0.5, "examples_per_s": 32.0} if name == "steady" else {}
    return PhaseRow.from_toml(
        {
            "name": name,
            "variant": "x",
            "verdict": verdict,
            "reason": "r",
            "memory": memory,
            "details": details,
        }
    )


def test_worst_verdict_orders_fail_over_warn_over_pass() -> None:
    assert worst(["pass", "warn", "pass"]) == "warn"
    assert worst(["pass", "fail", "warn"]) == "fail"
    assert worst([]) == "fail"


def test_ratio_refuses_to_invent_a_value() -> None:
    assert v.ratio(3.0, 2.0) == 1.5
    assert v.ratio(3.0, None) is None
    assert v.ratio(3.0, 0.0) is None
    assert v.ratio(float("nan"), 1.0) is None


def test_variant_phase_rows_keep_the_rerun() -> None:
    rows = [
        PhaseRow.from_toml({"name": "steady", "variant": "a", "verdict": "fail"}),
        PhaseRow.from_toml({"name": "steady", "variant": "b", "verdict": "pass"}),
        PhaseRow.from_toml({"name": "steady", "variant": "a", "verdict": "pass"}),
    ]
    assert v.variant_phase_rows(rows, "a")["steady"].verdict == "pass"


def test_peaks_take_the_max_over_rows_and_never_add_counters() -> None:
    rows = [
        _row("first_step", peak_allocated_mb=10, peak_reserved_mb=20),
        _row("eval_longest", peak_allocated_mb=15, peak_reserved_mb=18),
    ]
    assert v.peaks(rows) == {"peak_allocated_mb": 15, "peak_reserved_mb": 20}


def test_cuda_breakdown_subtracts_static_and_other_states() -> None:
    b = v.memory_breakdown(
        device_kind="cuda",
        weights_mb=10,
        gradients_mb=10,
        optimizer_state_mb=20,
        peak={"peak_allocated_mb": 100},
        other_states_mb=5,
    )
    assert b["static_mb"] == 40
    assert b["activation_peak_mb"] == 55


def test_cpu_breakdown_separates_the_process_from_the_configuration() -> None:
    b = v.memory_breakdown(
        device_kind="cpu",
        weights_mb=1,
        gradients_mb=1,
        optimizer_state_mb=2,
        peak={"peak_rss_mb": 310},
        process_baseline_mb=300,
    )
    assert b["dynamic_peak_mb"] == 10 and b["activation_peak_mb"] == 6
    assert "torch library" in b["memory_note"]
    # RSS below the baseline reads as zero, never negative.
    b = v.memory_breakdown(
        device_kind="cpu",
        weights_mb=1,
        gradients_mb=1,
        optimizer_state_mb=2,
        peak={"peak_rss_mb": 299},
        process_baseline_mb=300,
    )
    assert b["dynamic_peak_mb"] == 0 and b["activation_peak_mb"] == 0


def _entry(control: dict | None) -> dict:
    rows = {p: _row(p, peak_rss_mb=400 + i) for i, p in enumerate(phase_table.per_variant())}
    params = {"microbatch": 1, "accumulation": 16, "effective_batch": 16, "max_length": 28, "notes": ["n"]}
    breakdown = {"static_mb": 2.0, "saved_activations_mb": 0.5}
    question = v.question_change(
        examples=10,
        targets_changed=0,
        supervised_lost=0,
        supervised_control=100,
        effective_batch=16,
        control_effective_batch=16,
    )
    return v.compare_entry("mb1", params, rows, breakdown, question, control)


def test_entry_without_control_says_so_and_has_no_ratio() -> None:
    entry = _entry(None)
    assert entry["control_measured"] is False
    assert "control" in entry["ratio_note"]
    assert not [k for k in entry if k.endswith("_ratio")]
    assert entry["peak_rss_mb"] == 402 and entry["step_time_s"] == 0.5


def test_entry_ratios_are_taken_against_the_control() -> None:
    control = {
        "peak_rss_mb": 201.0,
        "step_time_s": 0.25,
        "examples_per_s": 64.0,
        "static_mb": 2.0,
        "saved_activations_mb": 2.0,
    }
    entry = _entry(control)
    assert entry["control_measured"] is True
    assert entry["peak_rss_ratio"] == 2.0
    assert entry["step_time_ratio"] == 2.0
    assert entry["examples_per_s_ratio"] == 0.5
    assert entry["static_ratio"] == 1.0  # accumulation frees neither weights nor optimizer state
    assert entry["saved_activations_ratio"] == 0.25
    assert entry["verdict"] == "pass" and entry["changes_question"] is False


def test_missing_or_failed_phase_fails_the_entry() -> None:
    rows = {"first_step": _row("first_step"), "eval_longest": _row("eval_longest", "fail")}
    entry = v.compare_entry("x", {}, rows, {}, {}, None)
    assert entry["verdict"] == "fail"
    assert entry["steady_verdict"] == "not run"
    assert "eval_longest: r" in entry["reason"] and "steady: not run" in entry["reason"]


def test_question_changes_with_cut_targets_or_a_moved_effective_batch() -> None:
    q = v.question_change(
        examples=200,
        targets_changed=50,
        supervised_lost=120,
        supervised_control=1000,
        effective_batch=16,
        control_effective_batch=16,
    )
    assert q["changes_question"] is True
    assert q["targets_changed_share"] == 0.25 and q["supervised_tokens_lost_share"] == 0.12
    q = v.question_change(
        examples=200,
        targets_changed=0,
        supervised_lost=0,
        supervised_control=1000,
        effective_batch=12,
        control_effective_batch=16,
    )
    assert q["changes_question"] is True and "16 -> 12" in q["question_note"]
    q = v.question_change(
        examples=200,
        targets_changed=0,
        supervised_lost=0,
        supervised_control=1000,
        effective_batch=16,
        control_effective_batch=16,
    )
    assert q["changes_question"] is False


@pytest.mark.parametrize(
    ("effective", "mb", "replicas", "expected"),
    [
        (16, 2, 1, (8, True)),
        (16, 16, 1, (1, True)),
        (16, 3, 1, (6, False)),
        (16, 32, 1, (1, False)),
        (16, 2, 2, (4, True)),
    ],
)
def test_accumulation_keeps_the_effective_batch(
    effective: int, mb: int, replicas: int, expected: tuple
) -> None:
    assert v.accumulation_for(effective, mb, replicas) == expected


def _point(mb: int, length: int, status: str) -> dict:
    return {"microbatch": mb, "max_length": length, "status": status}


def test_fit_result_prefers_the_declared_max_length() -> None:
    points = [
        _point(1, 16, v.FITS),
        _point(2, 16, v.FITS),
        _point(4, 16, v.FITS),
        _point(1, 28, v.FITS),
        _point(2, 28, v.OOM),
    ]
    out = v.fit_result(
        points,
        declared_microbatch=4,
        declared_max_length=28,
        effective_batch=16,
        replicas=1,
        ceiling_mb=0,
        counter="peak_rss_mb",
    )
    assert out["found"] and out["largest_microbatch"] == 1 and out["max_length"] == 28
    assert out["accumulation"] == 16 and out["keeps_effective_batch"] is True
    assert out["per_max_length"][0] == {
        "max_length": 16,
        "fits": True,
        "largest_microbatch": 4,
        "accumulation": 4,
        "keeps_effective_batch": True,
    }
    assert len(out["points"]) == 5 and out["fits"] == 4


def test_fit_result_when_nothing_fits() -> None:
    out = v.fit_result(
        [_point(1, 16, v.OVER_CEILING)],
        declared_microbatch=4,
        declared_max_length=16,
        effective_batch=16,
        replicas=1,
        ceiling_mb=1,
        counter="peak_rss_mb",
    )
    assert out["found"] is False and "largest_microbatch" not in out


# ------------------------------------------------------------------ spec and steps

BASE = """
[campaign]
name = "t"
[task]
builtin = "instruct"
[batch]
microbatch = 4
updates = 10
"""


def test_fit_search_is_a_step_after_the_variants() -> None:
    text = BASE + '[[variants]]\nid = "mb1"\nmicrobatch = 1\n[fit_search]\nmicrobatches = [1, 2, 4]\n'
    keys = [s.key for s in campaign_steps(parse_spec(text, Path("t.toml")).spec)]
    assert keys.index("fit_search") == keys.index("eval_longest@mb1") + 1
    assert "fit_search" not in [s.key for s in campaign_steps(parse_spec(BASE, Path("t.toml")).spec)]


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("[fit_search]\nmicrobatches = []\n", "fit_search.microbatches"),
        ("[fit_search]\nmicrobatches = [2, 0]\n", "fit_search.microbatches"),
        ("[fit_search]\nmicrobatches = [2, 2]\n", "fit_search.microbatches"),
        ("[fit_search]\nmicrobatches = [2]\nmax_lengths = [0]\n", "fit_search.max_lengths"),
        ("[fit_search]\nmicrobatches = [2]\nmemory_mb = -1\n", "fit_search.memory_mb"),
        ("[fit_search]\nmax_lengths = [8]\n", "fit_search.microbatches"),
        ('[[variants]]\nid = "same"\n', "variants[0]"),
    ],
)
def test_bad_fit_search_or_variant_is_refused_with_its_key(extra: str, key: str) -> None:
    with pytest.raises(SpecError, match=key.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(BASE + extra, Path("t.toml"))
