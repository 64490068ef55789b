"""The whole rental in the plan: disk, saves against the collective timeout, evaluations at their
declared size and frequency, restarts, throughput — each from a measured row field (pure, no torch).

Made-up records (the rows of `test_plan`) with figures chosen so the expected outcome follows from
arithmetic the test states; then the real CPU record the TUI tests replay.
"""

from __future__ import annotations

import math
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import deep_merge, demo_raw
from plan_records import NO_VARIANTS, engine_rows, record, row, stack_row

from pilot_tui.analysis.plan import Plan, compute_plan, text_lines
from pilot_tui.commands.cli import main
from pilot_tui.commands.plan import print_plan
from pilot_tui.core.spec import SpecError, parse_spec

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"
UPDATES = 80_000 * 1 // 16  # plan.dataset_size 80 000, one epoch, 16 per update


def rows_with(save: dict[str, Any] | None = None, resume: dict[str, Any] | None = None, **kw: Any) -> list:
    """The gated rows, the `save` row's details replaced, and a `resume` row when given."""
    out = [stack_row(), *engine_rows(**kw)]
    if save is not None:
        (saved,) = [r for r in out if r["step"] == "save"]
        saved["details"] = save
    if resume is not None:
        out.append(row("resume", duration=30.0, details=resume))
    return out


def spec(**plan: Any) -> dict[str, Any]:
    return NO_VARIANTS | {"plan": {"priority": ["control"], "dataset_size": 80_000, "epochs": 1} | plan}


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


# ------------------------------------------------------------------------------------------ disk


def test_checkpoints_that_do_not_fit_the_free_disk_block_the_plan(tmp_path: Path) -> None:
    size = 2 * free_bytes(tmp_path)  # one checkpoint twice the free space measured now
    data = record(rows_with(save={"artifact": {"size": size}, "save_s": 1.0}), spec(save_every=1000, keep=2))
    plan = compute_plan(data, record_dir=tmp_path)
    disk = plan.package.disk
    assert disk is not None and disk.status == "fail"
    assert disk.copies == 3  # 2 kept + the one being written
    assert disk.checkpoint_dir == str(tmp_path.resolve())
    assert plan.package.blocked and not plan.package.fits_all
    assert plan.package.summary.startswith("BLOCKED — disk: ")
    assert any(c.startswith("disk (fail): ") for c in plan.caveats)


def test_checkpoints_that_fit_pass_and_under_20_percent_headroom_warn(tmp_path: Path) -> None:
    free = free_bytes(tmp_path)
    small = record(
        rows_with(save={"artifact": {"size": 2**20}, "save_s": 1.0}), spec(save_every=1000, keep=2)
    )
    plan = compute_plan(small, record_dir=tmp_path)
    assert plan.package.disk is not None and plan.package.disk.status == "pass"
    assert plan.package.fits_all and not any(c.startswith("disk") for c in plan.caveats)
    # Every save kept (keep = 0): UPDATES // 1000 checkpoints of 0.9 × free / that many bytes.
    saves = UPDATES // 1000
    tight = record(
        rows_with(save={"artifact": {"size": int(0.9 * free / saves)}, "save_s": 1.0}), spec(save_every=1000)
    )
    plan = compute_plan(tight, record_dir=tmp_path)
    assert plan.package.disk is not None and plan.package.disk.copies == saves
    assert plan.package.disk.status == "warn" and "under 20% headroom" in plan.package.disk.reason
    assert plan.package.fits_all  # a warning qualifies the plan, it does not block it


def test_the_checkpoint_dir_is_relative_to_the_campaign_file(tmp_path: Path) -> None:
    data = record(
        rows_with(save={"artifact": {"size": 2**20}, "save_s": 1.0}), spec(checkpoint_dir="ckpt/run1")
    )
    data["campaign"]["spec_path"] = str(tmp_path / "campaign.toml")
    disk = compute_plan(data).package.disk
    assert disk is not None and disk.checkpoint_dir == str((tmp_path / "ckpt" / "run1").resolve())


# ------------------------------------------------------------------------------ saves and timeout


def test_a_save_near_the_collective_timeout_warns_on_several_gpus() -> None:
    # plan.gpus = 2 on a one-process pilot: NCCL's default 600 s timeout is the one the run gets.
    slow = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 400.0}), spec(gpus=2))
    timeout = compute_plan(slow).package.save_timeout
    assert timeout is not None and timeout.status == "warn" and timeout.timeout_s == 600.0
    assert "67% of the 600 s collective timeout" in timeout.reason
    fast = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 10.0}), spec(gpus=2))
    assert compute_plan(fast).package.save_timeout.status == "pass"  # type: ignore[union-attr]
    # One process: no collective waits on a save.
    assert compute_plan(record(rows_with(save={"save_s": 400.0}), spec())).package.save_timeout is None


def test_under_distributed_the_declared_timeout_is_the_one_compared() -> None:
    changes = spec() | {"distributed": {"strategy": "ddp", "nproc_per_node": 2, "timeout_s": 300}}
    changes["batch"] = {"replicas": 2}
    data = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 200.0}, replicas=2), changes)
    timeout = compute_plan(data).package.save_timeout
    assert timeout is not None and timeout.timeout_s == 300.0 and timeout.status == "warn"
    assert "[distributed] timeout_s" in timeout.timeout_source


def test_saves_are_the_timed_write_times_the_declared_count() -> None:
    data = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 0.5}), spec(save_every=500))
    (run,) = compute_plan(data).package.order
    assert run.checkpoints == UPDATES // 500
    assert run.save_s == pytest.approx(UPDATES // 500 * 0.5)
    # A record made before the write was timed alone: the whole phase (4 s in these rows).
    older = record(rows_with(), spec(save_every=500))
    assert compute_plan(older).package.order[0].save_s == pytest.approx(UPDATES // 500 * 4.0)


# ------------------------------------------------------------------------------------- evaluation


def test_an_evaluation_that_dominates_shows_as_the_largest_part() -> None:
    # eval_longest: 4 examples in a 0.2 s forward (20 examples/s); 2000 examples every 100 updates.
    data = record(rows_with(step_time=0.01), spec(eval_every=100, eval_examples=2000))
    plan = compute_plan(data)
    (run,) = plan.package.order
    assert run.evaluations == UPDATES // 100
    assert run.eval_batches == math.ceil(2000 / 4)
    assert run.eval_s == pytest.approx(UPDATES // 100 * math.ceil(2000 / 4) * 0.2)
    assert run.eval_examples_per_s == pytest.approx(4 / 0.2)
    assert run.eval_s > run.train_s
    (bar,) = [line for line in text_lines(plan) if line.startswith("     control: [")]
    cells = bar.split("[", 1)[1].split("]", 1)[0]
    assert cells.count("E") > cells.count("S")
    # Its twin, evaluating rarely: the steps dominate again.
    rare = compute_plan(record(rows_with(step_time=0.01), spec(eval_every=5000, eval_examples=200)))
    assert rare.package.order[0].eval_s < rare.package.order[0].train_s


# --------------------------------------------------------------------------------------- restarts


RESUME = {
    "n": 8,
    "new_process": {"seconds": 10.0, "inside_s": {"setup_and_load": 2.0, "train": 4.0}},
    "skip_updates": 20,
    "skip_microbatches": 80,
    "skip_examples": 320,
    "skip_s": 0.4,
}


def test_restarts_are_a_fresh_process_a_skip_to_mid_package_and_half_a_save_interval() -> None:
    data = record(rows_with(resume=RESUME, step_time=0.5), spec(save_every=1000, restarts=2))
    (run,) = compute_plan(data).package.order
    r = run.restart
    assert r is not None
    # The process up to its first update: 10 s minus the 8 timed updates, plus one of them.
    assert r.process_s == pytest.approx(10.0 - 4.0 + 4.0 / 8)
    # Mid-package, one epoch: update 2500 of 5000 re-reads 2500 × 16 examples at 0.4 s / 320 each.
    assert r.skip_examples == UPDATES // 2 * 16
    assert r.skip_s == pytest.approx(UPDATES // 2 * 16 * 0.4 / 320)
    assert r.redo_s == pytest.approx(1000 / 2 * 0.5)
    assert run.restarts == 2 and run.restarts_s == pytest.approx(2 * r.total_s, abs=1e-3)
    none = compute_plan(record(rows_with(resume=RESUME), spec(restarts=0))).package.order[0]
    assert none.restarts_s == 0.0
    # Without a resume row there is no restart figure, and the plan says so.
    plain = compute_plan(record(rows_with(), spec(restarts=1)))
    assert plain.package.order[0].restart is None
    assert any("no restart reserve" in a for a in plain.package.assumptions)


# ------------------------------------------------------------------------------------- throughput


def test_throughput_is_non_padding_tokens_and_examples_and_mfu_only_on_a_known_gpu() -> None:
    rows = rows_with(precision="bf16")
    for r in rows:
        if r["step"] == "steady":
            r["details"] |= {"tokens_per_s": 100_000.0, "examples_per_s": 400.0}
        if r["step"] == "load":
            r["details"] = {"parameters": 1_000_000_000}
        if r["step"] == "stack":
            r["details"]["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3"
            r["details"]["precisions"] = [
                {"precision": "bf16", "ok": True, "error": "", "used_by": ["control"]}
            ]
    data = record(rows, spec() | {"batch": {"precision": "bf16"}})
    (tp,) = compute_plan(data).package.throughput
    assert (tp.tokens_per_s, tp.examples_per_s) == (100_000.0, 400.0)
    assert tp.mfu == pytest.approx(6 * 1e9 * 1e5 / 989e12, abs=1e-4)
    # An unknown GPU: no made-up peak, no MFU; a CPU pilot: none either.
    for r in rows:
        if r["step"] == "stack":
            r["details"]["gpus"][0]["name"] = "Some Future GPU"
    assert compute_plan(record(rows, spec())).package.throughput[0].mfu is None
    cpu = record(rows, spec())
    cpu["environment"]["device"] = "cpu"
    assert compute_plan(cpu).package.throughput[0].mfu is None


# ---------------------------------------------------------------------------- the command and spec


def test_plan_recomputes_with_another_schedule_without_a_new_pilot(tmp_path: Path, capsys) -> None:
    data = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 0.5}, resume=RESUME), spec())
    data["plan"] = compute_plan(data, record_dir=tmp_path).as_toml()
    path = tmp_path / "demo-x.toml"
    path.write_text(tomli_w.dumps(data))
    before = path.read_bytes()
    assert main(["plan", str(path), "--save-every", "250", "--keep", "3", "--eval-every", "1000"]) == 0
    out = capsys.readouterr().out
    assert "re-planned with plan.save_every = 250, plan.keep = 3, plan.eval_every = 1000" in out
    assert f"saves {UPDATES // 250} × 0.5 s" in out
    assert "checkpoint 1 MiB × 4 = " in out  # 3 kept + the one being written
    assert path.read_bytes() == before  # read-only
    assert print_plan(path) == 0
    assert f"saves {UPDATES // 250} ×" not in capsys.readouterr().out  # the record's own schedule
    with pytest.raises(SystemExit) as bad:
        main(["plan", str(path), "--keep", "-1"])
    assert bad.value.code == 2


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"save_every": -1}, "plan.save_every"),
        ({"restarts": -2}, "plan.restarts"),
        ({"save_every": 100, "checkpoints": 3}, "plan.save_every"),
        ({"eval_every": 100, "evaluations": 3}, "plan.eval_every"),
        ({"eval_examples": 100, "validation_size": 3}, "plan.eval_examples"),
    ],
)
def test_a_bad_rental_key_is_refused_by_name_and_its_twin_passes(changes: dict, key: str) -> None:
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        parse_spec(tomli_w.dumps(deep_merge(demo_raw(), {"plan": changes})), Path("campaign.toml"))
    twin = {
        k: abs(v)
        for k, v in changes.items()
        if k in ("save_every", "restarts", "eval_every", "eval_examples")
    }
    parse_spec(tomli_w.dumps(deep_merge(demo_raw(), {"plan": twin})), Path("campaign.toml"))


# ------------------------------------------------------------------------------ a real CPU record


def test_a_real_cpu_record_plans_its_parts_and_reads_back(tmp_path: Path) -> None:
    data = tomllib.loads(RECORD.read_text())
    plan = compute_plan(data, record_dir=tmp_path)
    lines = text_lines(plan)
    for run in plan.package.order:
        parts = [run.train_s, run.eval_s, run.save_s, run.restarts_s, run.export_s, run.margin_s]
        assert sum(parts) == pytest.approx(run.total_s, abs=0.01)
        assert any(line.startswith(f"     {run.id}: [S") for line in lines)
    # Its resume row predates the timed skip: said, not invented.
    assert any("data skip not measured" in line for line in lines)
    assert plan.package.disk is not None and plan.package.disk.status == "pass"
    assert all(t.tokens_per_s and t.mfu is None for t in plan.package.throughput)  # CPU: no MFU
    assert Plan.from_toml(tomllib.loads(tomli_w.dumps(plan.as_toml()))) == plan


def test_a_blocked_plan_names_the_phase_its_cause_and_the_first_thing_to_do(tmp_path: Path) -> None:
    failed = row("resume", verdict="fail", duration=30.0, details={})
    failed["reason"] = (
        "the resumed run differs from the uninterrupted one from step 3 (loss) after resuming at step 2"
    )
    plan = compute_plan(record([stack_row(), *engine_rows(), failed], spec()), record_dir=tmp_path)
    summary = plan.package.summary
    assert summary.startswith("BLOCKED — resume failed: the resumed run differs") and plan.package.blocked
    assert "— first: read the resume row's first differing update" in summary
    # A row that measured a likelier cause says so itself, in place of the table's first step.
    failed["details"] = {"first_step": "rule out the known cause first: dataloader_num_workers = 2"}
    plan = compute_plan(record([stack_row(), *engine_rows(), failed], spec()), record_dir=tmp_path)
    assert "— first: rule out the known cause first: dataloader_num_workers = 2" in plan.package.summary


# ------------------------------------------------------------------------ the provider's job limit


def test_a_24_hour_job_limit_cuts_the_run_into_jobs_with_a_save_cadence_and_the_work_redone() -> None:
    # 400 000 updates at 0.5 s = 55.6 h of steps: three 24 h jobs; a save of 30 s is 10 % of a
    # 270 s interval (540 updates), at least 4 a job.
    data = record(
        rows_with(save={"artifact": {"size": 2**20}, "save_s": 30.0}, resume=RESUME, step_time=0.5),
        spec(dataset_size=6_400_000, max_job_hours=24, restarts=0),
    )
    plan = compute_plan(data)
    (run,) = plan.package.order
    jobs = run.jobs
    assert jobs is not None and jobs.max_job_h == 24 and not jobs.preemptible
    assert jobs.save_every_updates == 540 and jobs.save_interval_s == pytest.approx(270.0)
    assert jobs.save_share == pytest.approx(30 / 300, abs=1e-4)
    work = run.total_s - run.margin_s - jobs.extra_s  # the work before the job ends were added
    assert jobs.jobs == math.ceil(work / (24 * 3600 - jobs.restart_s))
    assert jobs.jobs >= 3 and jobs.redo_planned_s == 0.0 and jobs.redo_preempted_s == pytest.approx(270.0)
    # Each planned job end is a restart: measured from the resume row, added to the run.
    assert jobs.restart_s == pytest.approx(run.restart.process_s + run.restart.skip_s, abs=1e-3)
    assert jobs.extra_s == pytest.approx((jobs.jobs - 1) * jobs.restart_s, abs=1e-2)
    line = next(x for x in text_lines(plan) if "job(s), jobs of at most 24 h" in x)
    assert "save every 540 updates" in line and "redoes 0 s at a planned end" in line, line
    # Without a limit nothing of it is planned; a save too slow for 4 checkpoints a job is said.
    free = compute_plan(record(rows_with(resume=RESUME, step_time=0.5), spec(dataset_size=6_400_000)))
    assert free.package.order[0].jobs is None
    slow = record(
        rows_with(save={"artifact": {"size": 2**20}, "save_s": 3_000.0}, resume=RESUME, step_time=0.5),
        spec(dataset_size=6_400_000, max_job_hours=24, preemptible=True, restarts=0),
    )
    slow_jobs = compute_plan(slow).package.order[0].jobs
    assert (
        slow_jobs is not None and slow_jobs.preemptible and "fewer than 4 checkpoints a job" in slow_jobs.note
    )


def test_the_job_limit_is_a_plan_flag_and_a_bad_value_is_refused(tmp_path: Path, capsys) -> None:
    data = record(rows_with(save={"artifact": {"size": 2**20}, "save_s": 30.0}, resume=RESUME), spec())
    data["plan"] = compute_plan(data, record_dir=tmp_path).as_toml()
    path = tmp_path / "demo-x.toml"
    path.write_text(tomli_w.dumps(data))
    assert main(["plan", str(path), "--max-job-hours", "24", "--preemptible"]) in (0, 1)
    assert "jobs of at most 24 h; preemptible" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main(["plan", str(path), "--max-job-hours", "-3"])
    assert bad.value.code == 2
    with pytest.raises(SpecError, match=r"plan\.max_job_hours"):
        parse_spec(
            tomli_w.dumps(deep_merge(demo_raw(), {"plan": {"max_job_hours": -1}})), Path("campaign.toml")
        )


# ------------------------------------------------------------------------------ which GPU to rent


def test_candidate_gpus_side_by_side_measured_projected_and_priced() -> None:
    from pilot_tui.analysis.plan.candidates import candidate_lines, candidates

    rows = rows_with(step_time=0.5)
    (stack,) = [r for r in rows if r["step"] == "stack"]
    stack["details"]["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3"
    plan = compute_plan(record(rows, spec()))
    hours = sum(o.total_h for o in plan.package.order)
    found = {c.name: c for c in candidates(plan, {"H100": 2.0, "RTX 4090": 0.4})}
    assert list(found) == ["H100 SXM", "H200 SXM", "A100 80GB SXM", "L40S", "RTX 4090"]
    h100, a100, rtx = found["H100 SXM"], found["A100 80GB SXM"], found["RTX 4090"]
    assert h100.basis == "measured" and h100.hours == pytest.approx(hours, abs=1e-3)
    assert h100.cost == pytest.approx(hours * 2.0, abs=0.01)
    # Projected by the dense fp32 peaks (the record's precision): 67 on H100, 19.5 on A100, 82.6 on a 4090.
    assert a100.basis.startswith("projected") and a100.hours == pytest.approx(hours * 67 / 19.5, rel=1e-3)
    assert rtx.hours == pytest.approx(hours * 67 / 82.6, rel=1e-3) and rtx.cost is not None
    assert found["L40S"].cost is None  # no price given for it
    assert all(c.fits for c in found.values())  # the measured need is far below 24 GB
    lines = candidate_lines(plan, {})
    assert lines[1] == "Which GPU" and any("projected: measured step × 67/19.5" in x for x in lines)
    # A pilot on a CPU projects no GPU's hours, and says why.
    cpu = [r for r in rows_with(step_time=0.5) if r["step"] != "stack"]
    cpu_plan = compute_plan(record(cpu, spec()) | {"environment": {"device": "cpu", "torch": "2.13.0"}})
    assert {c.basis for c in candidates(cpu_plan)} <= {
        "not projected: measured on a CPU",
        "not projected: nothing planned",
    }


# ------------------------------------------------------------------------ the long run on the GPU


def test_fragmentation_growing_over_steady_names_the_update_reserved_memory_fills_the_gpu() -> None:
    rows = rows_with(step_time=0.5)
    (steady,) = [r for r in rows if r["step"] == "steady"]
    # 2 MiB more unused reserve per update over 500 timed updates; 70 000 of 81 559 MiB reserved:
    # full after (81 559 − 70 000) / 2 ≈ 5 780 more updates, before the run's 5 000 × … updates.
    steady["details"]["fragmentation"] = {
        "gap_first_mb": 100.0,
        "gap_last_mb": 1098.0,
        "reserved_last_mb": 70_000.0,
        "gpu_total_mb": 81_559.0,
        "updates_between": 499,
        "slope_mb_per_update": 2.0,
    }
    plan = compute_plan(record(rows, spec(dataset_size=800_000)))
    said = [c for c in plan.caveats if "fragmentation:" in c]
    assert said and "after ~5,780 more updates" in said[0] and "expandable_segments:True" in said[0], (
        plan.caveats
    )
    # A settling allocator (under 64 MiB over steady) or a run that ends first: nothing said.
    steady["details"]["fragmentation"] |= {"slope_mb_per_update": 0.1, "gap_last_mb": 150.0}
    assert not [
        c for c in compute_plan(record(rows, spec(dataset_size=800_000))).caveats if "fragmentation" in c
    ]
    steady["details"]["fragmentation"] |= {"slope_mb_per_update": 2.0}
    assert not [
        c for c in compute_plan(record(rows, spec(dataset_size=16_000))).caveats if "fragmentation" in c
    ]


def test_preprocessing_scaled_to_the_full_dataset_against_the_collective_timeout() -> None:
    rows = rows_with(step_time=0.5)
    (load,) = [r for r in rows if r["step"] == "load"]
    # 12 s before train() for 800 rows: 12 000 s for the full 800 000, 2 000 % of NCCL's 600 s.
    load["details"] |= {"capture_s": 12.0, "train_examples": 800}
    two = compute_plan(record(rows, spec(dataset_size=800_000, gpus=2)))
    said = [c for c in two.caveats if c.startswith("preprocessing:")]
    assert said and "~12,000 s" in said[0] and "2000% of the 600 s collective timeout" in said[0], two.caveats
    # One process waits for no collective; a dataset the pilot already held is no projection.
    assert not [
        c for c in compute_plan(record(rows, spec(dataset_size=800_000))).caveats if "preprocessing" in c
    ]
    assert not [
        c for c in compute_plan(record(rows, spec(dataset_size=800, gpus=2))).caveats if "preprocessing" in c
    ]
