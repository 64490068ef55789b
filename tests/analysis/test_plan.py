"""The choice sheet and the package plan from synthetic-but-realistic record dicts (pure, no torch).

The rows (`tests/plan_records.py`) have the shape the runner writes (`params`, `memory`, `details`); the durations are
chosen by each test so the expected package follows from arithmetic the test states, never from a
figure measured on some machine.
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path

import pytest
from conftest import deep_merge
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_records import NO_VARIANTS, PRECISION_OK, engine_rows, record, row, stack_row

from pilot_tui.analysis.plan import DAY_S, Plan, PlanFormatError, compute_plan, plan_lines
from pilot_tui.commands.plan import print_plan
from pilot_tui.core.record import RecordError, dumps


def test_stack_failure_keeps_no_configuration_and_plans_nothing():
    rows = [stack_row("fail", "extension definitely_not_a_module_xyz does not import"), *engine_rows()]
    plan = compute_plan(record(rows, NO_VARIANTS))
    sheet, package = plan.sheet, plan.package
    assert sheet.kept == ""
    assert sheet.stack_status == "fail"
    assert "definitely_not_a_module_xyz" in sheet.kept_reason
    (control,) = sheet.configurations
    assert control.status == "rejected" and "stack check failed" in control.reason
    assert package.order == () and package.days == 0 and not package.fits_all
    assert package.not_fit[0].cause == "rejected"


def test_a_campaign_without_a_stack_check_keeps_nothing():
    plan = compute_plan(record(engine_rows(), NO_VARIANTS))
    assert plan.sheet.kept == ""
    assert plan.sheet.stack_status == "missing"
    assert "stack not checked" in plan.sheet.configurations[0].reason


def test_kept_is_the_first_priority_configuration_whose_gates_pass():
    rows = [stack_row(), *engine_rows(), *engine_rows("mb1", microbatch=1, accumulation=16)]
    rows[-2]["verdict"] = "fail"  # steady@mb1
    rows[-2]["reason"] = "out of memory in steady"
    spec = {"variants": [{"id": "mb1", "microbatch": 1}], "plan": {"priority": ["mb1", "control"]}}
    sheet = compute_plan(record(rows, spec)).sheet
    assert sheet.kept == "control"
    assert "mb1: steady@mb1 failed: out of memory in steady" in sheet.kept_reason
    status = {c.id: c.status for c in sheet.configurations}
    assert status == {"control": "kept", "mb1": "rejected"}


def test_a_variant_in_an_unsupported_precision_is_rejected():
    precisions = [
        PRECISION_OK,
        {"precision": "bf16", "ok": False, "error": "no native bf16", "used_by": ["b"]},
    ]
    rows = [
        stack_row("warn", "variant b: bf16", precisions),
        *engine_rows(),
        *engine_rows("b", precision="bf16"),
    ]
    spec = {"variants": [{"id": "b", "precision": "bf16"}], "plan": {"priority": ["b", "control"]}}
    sheet = compute_plan(record(rows, spec)).sheet
    by_id = {c.id: c for c in sheet.configurations}
    assert by_id["b"].status == "rejected" and "precision bf16" in by_id["b"].reason
    assert sheet.kept == "control"


def test_memory_per_gpu_is_the_highest_peak_reserved_plus_headroom_never_a_sum():
    rows = [stack_row(), *engine_rows(peak=2000.0)]
    sheet = compute_plan(record(rows, NO_VARIANTS | {"plan": {"headroom": 0.25}})).sheet
    highest = max(r["memory"]["peak_reserved_mb"] for r in rows if r["name"] != "stack")
    assert sheet.peak_mb == pytest.approx(highest)
    assert sheet.memory_per_gpu_mb == pytest.approx(highest * 1.25)
    assert "reserved" in sheet.memory_basis
    allocated = max(r["memory"]["peak_allocated_mb"] for r in rows)
    assert sheet.peak_mb != pytest.approx(highest + allocated)


def test_on_cpu_the_sheet_says_it_uses_process_rss():
    rows = [stack_row(), *engine_rows()]
    for r in rows:
        r["memory"] = {"baseline_rss_mb": 200.0, "rss_mb": 300.0, "peak_rss_mb": 310.0 + len(r["step"])}
    sheet = compute_plan(record(rows, NO_VARIANTS)).sheet
    assert "RSS" in sheet.memory_basis
    assert sheet.peak_mb == pytest.approx(max(r["memory"]["peak_rss_mb"] for r in rows[1:]))


def test_largest_dimensions_come_from_passing_rows_and_the_fit_search():
    rows = [stack_row(), *engine_rows(), row("first_step@big", verdict="fail", microbatch=64, max_length=512)]
    data = record(rows, NO_VARIANTS)
    sheet = compute_plan(data).sheet
    assert (sheet.max_microbatch_passed, sheet.max_length_passed) == (4, 28)
    data["fit"] = {"found": True, "largest_microbatch": 12, "max_length": 28, "accumulation": 2}
    sheet = compute_plan(data).sheet
    assert sheet.max_microbatch_passed == 12
    assert "[fit]" in sheet.max_dims_source


def _expected_total_s(step_time: float, updates: int, margin: float, evaluations: int, val: int) -> float:
    """The documented estimator, written out independently of plan.py."""
    train = 3.0 + 2 * step_time + (updates - 1) * step_time  # load + first update + the rest
    evaluate = evaluations * math.ceil(val / 4) * 0.2
    save, export = evaluations * 4.0, 2.0  # one checkpoint per epoch, one export
    return (train + evaluate + save + export) * (1 + margin)


@pytest.mark.parametrize("target_days, package", [(2.0, 3), (5.5, 7), (20.0, 30)])
def test_the_smallest_package_that_holds_the_work_is_chosen(target_days: float, package: int):
    updates = 160_000 * 2 // 16
    # A step time that puts the whole run near the target (the other terms are small).
    step_time = target_days * DAY_S / 1.2 / updates
    rows = [stack_row(), *engine_rows(step_time=step_time)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 160_000, "epochs": 2}}
    pkg = compute_plan(record(rows, spec)).package
    assert pkg.days == package and pkg.fits_all
    (only,) = pkg.order
    assert only.updates == updates
    val = round(160_000 * 0.1 / 0.8)
    assert only.total_s == pytest.approx(_expected_total_s(step_time, updates, 0.2, 2, val), rel=1e-6)
    assert only.end_h <= package * 24


def test_work_beyond_30_days_says_so_and_lists_what_does_not_fit():
    updates = 200_000 * 3 // 16
    fast = 10 * DAY_S / 1.2 / updates  # ~10 days
    slow = 25 * DAY_S / 1.2 / updates  # ~25 days: cannot follow the first inside 30 days
    rows = [
        stack_row(),
        *engine_rows(step_time=fast),
        *engine_rows("ckpt", step_time=slow),
        *engine_rows("mb1", step_time=fast * 1.1, microbatch=1, accumulation=16),
    ]
    spec = {
        "variants": [{"id": "ckpt", "activation_checkpointing": True}, {"id": "mb1", "microbatch": 1}],
        "plan": {"priority": ["control", "ckpt", "mb1"], "dataset_size": 200_000, "epochs": 3},
    }
    pkg = compute_plan(record(rows, spec)).package
    assert pkg.days == 0 and not pkg.fits_all
    assert "does not fit in 30 days" in pkg.summary
    assert [o.id for o in pkg.order] == ["control", "mb1"]  # priority order, what fits
    (left,) = pkg.not_fit
    assert left.id == "ckpt" and left.cause == "no_time"
    assert pkg.planned_h <= 30 * 24
    text = "\n".join(plan_lines(compute_plan(record(rows, spec))))
    assert "does not fit in 30 days" in text and "not planned: ckpt (no_time)" in text


def test_a_single_run_longer_than_30_days_is_listed_as_not_fitting():
    updates = 200_000 * 3 // 16
    rows = [stack_row(), *engine_rows(step_time=40 * DAY_S / updates)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 200_000, "epochs": 3}}
    pkg = compute_plan(record(rows, spec)).package
    assert pkg.order == () and pkg.not_fit[0].id == "control"
    assert "does not fit in 30 days" in pkg.summary


def test_more_planned_gpus_give_no_speed_up_unless_measured():
    rows = [stack_row(), *engine_rows(step_time=0.3)]
    base = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 100_000, "gpus": 1}}
    one = compute_plan(record(rows, base)).package
    four = compute_plan(record(rows, deep_merge(base, {"plan": {"gpus": 4}}))).package
    assert four.order[0].total_s == one.order[0].total_s
    assert any("estimate is for 1 GPU" in a for a in four.assumptions)
    assert not any("GPU(s); no speed-up" in a for a in one.assumptions)


def test_without_a_dataset_size_the_declared_hold_sets_the_updates():
    rows = [stack_row(), *engine_rows(step_time=0.1)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 0}, "batch": {"updates": 321}}
    (only,) = compute_plan(record(rows, spec)).package.order
    assert only.updates == 321
    assert "declared hold" in only.basis


def test_the_startup_counts_the_first_update_not_the_checks_of_its_phase():
    # first_step's phase runs two more forwards for its objective checks before the update; a
    # run's startup is its load and its first update alone (update_s), when the row has it.
    rows = [stack_row(), *engine_rows(step_time=0.1)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 0}, "batch": {"updates": 50}}
    (before,) = compute_plan(record(rows, spec)).package.order
    assert before.startup_s == pytest.approx(3.0 + 2 * 0.1)  # load + the whole first_step phase
    first = next(r for r in rows if r["step"] == "first_step")
    first["details"] = {**first.get("details", {}), "update_s": 0.13}
    (after,) = compute_plan(record(rows, spec)).package.order
    assert after.startup_s == pytest.approx(3.0 + 0.13)
    assert after.train_s == pytest.approx(3.0 + 0.13 + 49 * 0.1)
    first["details"]["update_s"] = -5.0  # a hostile record plans no negative startup
    (hostile,) = compute_plan(record(rows, spec)).package.order
    assert hostile.startup_s == pytest.approx(3.0)


def test_the_eval_reserve_scales_with_validation_size_and_evaluations():
    rows = [stack_row(), *engine_rows(step_time=0.1)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 80_000, "validation_size": 1000}}
    one = compute_plan(record(rows, deep_merge(spec, {"plan": {"evaluations": 1}}))).package.order[0]
    six = compute_plan(record(rows, deep_merge(spec, {"plan": {"evaluations": 6}}))).package.order[0]
    assert one.eval_batches == math.ceil(1000 / 4)
    assert six.eval_s == pytest.approx(6 * one.eval_s)
    assert one.eval_s == pytest.approx(math.ceil(1000 / 4) * 0.2)


def test_unknown_and_unmeasured_priority_entries_are_listed_not_dropped():
    rows = [stack_row(), *engine_rows()]
    spec = {
        "variants": [{"id": "ckpt", "activation_checkpointing": True}],
        "plan": {"priority": ["control", "ckpt", "ghost"]},
    }
    pkg = compute_plan(record(rows, spec)).package
    causes = {n.id: n.cause for n in pkg.not_fit}
    assert causes == {"ckpt": "not_measured", "ghost": "not_measured"}
    assert [o.id for o in pkg.order] == ["control"]


def test_the_plan_is_toml_safe_and_reads_back_identically():
    rows = [stack_row(), *engine_rows(), *engine_rows("mb1", microbatch=1, accumulation=16)]
    spec = {"variants": [{"id": "mb1", "microbatch": 1}], "plan": {"priority": ["control", "mb1"]}}
    data = record(rows, spec)
    data["plan"] = compute_plan(data).as_toml()
    back = tomllib.loads(dumps(data))
    assert back["plan"]["sheet"]["kept"] == "control"
    assert [o["id"] for o in back["plan"]["package"]["order"]] == ["control", "mb1"]
    assert back["plan"] == tomllib.loads(dumps({"plan": data["plan"]}))["plan"]
    # Typed again from what the record holds: the same plan, field for field.
    assert Plan.from_toml(back["plan"]) == compute_plan(data)


def test_a_plan_table_this_version_did_not_write_is_refused_by_name():
    data = record([stack_row(), *engine_rows()], NO_VARIANTS)
    saved = compute_plan(data).as_toml()
    del saved["sheet"]["kept"]
    with pytest.raises(PlanFormatError, match=r"plan\.sheet\.kept: missing"):
        Plan.from_toml(saved)
    saved = compute_plan(data).as_toml()
    saved["package"]["days"] = "three"
    with pytest.raises(PlanFormatError, match=r"plan\.package\.days: expected int"):
        Plan.from_toml(saved)


def test_print_plan_reads_a_saved_record_and_leaves_it_untouched(tmp_path: Path, capsys):
    data = record([stack_row(), *engine_rows()], NO_VARIANTS)
    path = tmp_path / "demo-x.toml"
    path.write_text(dumps(data))
    before = path.read_bytes()
    assert print_plan(path) == 0
    out = capsys.readouterr().out
    assert "Choice sheet" in out and "Package plan" in out and "kept                control" in out
    assert path.read_bytes() == before

    failing = copy.deepcopy(data)
    failing["phases"][0]["verdict"] = "fail"
    path.write_text(dumps(failing))
    assert print_plan(path) == 1


def test_print_plan_refuses_a_bad_record(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(RecordError, match=r"bad\.toml"):
        print_plan(bad)
    with pytest.raises(RecordError, match="not found"):
        print_plan(tmp_path / "missing.toml")
    nospec = tmp_path / "nospec.toml"
    nospec.write_text(dumps({"campaign": {"name": "x"}, "phases": []}))
    with pytest.raises(RecordError, match=r"nospec\.toml"):
        print_plan(nospec)


# ------------------------------------------------------------------ edge cases found in review


def test_a_pilot_split_smaller_than_one_update_is_listed_not_a_crash():
    # hold = updates, drop_last, no plan.dataset_size, and 8 training examples for 16 per update:
    # no update can be made from this split, so the run has no number of epochs to reserve for.
    rows = [stack_row(), *engine_rows(step_time=0.1)]
    spec = NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 0}}
    data = record(rows, spec)
    data["dataset"]["splits"]["train"] = 8
    pkg = compute_plan(data).package
    assert pkg.order == () and pkg.days == 0
    (entry,) = pkg.not_fit
    assert entry.cause == "not_measured" and "plan.dataset_size" in entry.reason


def test_a_precision_the_stack_phase_never_checked_is_not_kept():
    # fp16 made in the TUI after the stack ran: the stack's precisions hold only fp32.
    rows = [stack_row(), *engine_rows(), *engine_rows("half", precision="fp16")]
    spec = {"variants": [], "plan": {"priority": ["half", "control"]}}
    sheet = compute_plan(record(rows, spec)).sheet
    by_id = {c.id: c for c in sheet.configurations}
    assert by_id["half"].status == "rejected"
    assert "precision fp16 not supported: the stack phase did not check it" in by_id["half"].reason
    assert sheet.kept == "control"


def test_largest_dimensions_ignore_a_configuration_whose_later_gate_failed():
    big = engine_rows("big", microbatch=32, accumulation=1, max_length=64)
    big[-1]["verdict"] = "fail"  # eval_longest@big: out of memory after first_step and steady passed
    rows = [stack_row(), *engine_rows(), *big]
    sheet = compute_plan(record(rows, NO_VARIANTS)).sheet
    assert (sheet.max_microbatch_passed, sheet.max_length_passed) == (4, 28)
    big[-1]["verdict"] = "pass"
    sheet = compute_plan(record(rows, NO_VARIANTS)).sheet
    assert (sheet.max_microbatch_passed, sheet.max_length_passed) == (32, 64)


def test_a_kept_variant_that_changes_the_question_says_so():
    rows = [stack_row(), *engine_rows(), *engine_rows("len16", max_length=16)]
    note = "3 of 371 training examples (0.8%) have different targets"
    extra = {"variants": [{"id": "len16", "changes_question": True, "question_note": note}]}
    spec = {"variants": [{"id": "len16", "max_length": 16}], "plan": {"priority": ["len16", "control"]}}
    sheet = compute_plan(record(rows, spec, extra)).sheet
    assert sheet.kept == "len16"
    assert f"it changes the question: {note}" in sheet.kept_reason


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target_days=st.lists(st.floats(0.05, 40.0), min_size=1, max_size=4))
def test_packing_takes_the_smallest_package_or_fills_30_days_in_priority_order(target_days):
    """Each configuration's run is sized to about `target_days`; whatever the mix, the package is
    the smallest that holds all of it, or 30 days filled greedily in priority order."""
    updates = 100_000 // 16
    ids = ["control", *(f"v{i}" for i in range(1, len(target_days)))]
    rows = [stack_row()]
    for config, days in zip(ids, target_days, strict=True):
        rows += engine_rows(config, step_time=days * DAY_S / 1.2 / updates)
    spec = {"variants": [], "plan": {"priority": ids, "dataset_size": 100_000, "epochs": 1}}
    pkg = compute_plan(record(rows, spec)).package
    planned = [o.id for o in pkg.order]
    assert planned == [c for c in ids if c in planned]  # priority order kept
    assert {n.id for n in pkg.not_fit} | set(planned) == set(ids)
    totals = {o.id: o.total_s for o in pkg.order}
    used = sum(totals.values())
    if pkg.days:
        assert pkg.fits_all and planned == ids
        assert used <= pkg.days * DAY_S
        smaller = [d for d in (3, 7, 30) if d < pkg.days]
        assert all(used > d * DAY_S for d in smaller)  # no smaller package holds it
    else:
        assert not pkg.fits_all and used <= 30 * DAY_S
        assert pkg.need_h > 30 * 24
        for n in pkg.not_fit:
            assert n.cause == "no_time"
            before = sum(totals[c] for c in ids[: ids.index(n.id)] if c in totals)
            assert n.total_h * 3600 > 30 * DAY_S - before - 3600 * 0.01  # it did not fit the rest
    assert pkg.planned_h == pytest.approx(used / 3600, abs=0.01)
