"""The phases on 2 ranks under torchrun (gloo, CPU): DDP and FSDP2, per-rank rows, the global loss
normalisation, resume in a new process group, FSDP2's sharded checkpoints resumed at the same
and at another world size, and a rank that raises, dies or hangs (R22, R28).

One Session (one runner, one torchrun group reused across phases) serves every test: torchrun's
start-up (an interpreter and a torch import per rank) is the cost, so launches are shared. The
fsdp side runs as the campaign's declared `fsdp` variant and as ad-hoc `@fsdp` steps beside the
ddp control, in the same group.
"""

from __future__ import annotations

import dataclasses
import re
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.events import PhaseFinished, PhaseProgress, WireMessage
from pilot_tui.session.driver import Session

WORLD = 2
# Long enough for a loaded 2-core CI machine to start a collective on every rank, short enough
# that the hang test ends in seconds.
TIMEOUT_S = 8


def distributed_campaign(folder: Path) -> Path:
    raw = deep_merge(demo_raw(), FAST)
    raw = deep_merge(
        raw,
        {
            "phases": {
                "skip": ["inspect", "split", "overfit", "lr_run"],
                # The minimum of steady updates, timed no longer: the rows' figures are per rank,
                # not precise, and every steady here (ddp, fsdp, the slow collate) is shorter.
                "steady_updates": 3,
                "steady_budget_s": 0.0,
            },
            "distributed": {
                "strategy": "ddp",
                "nproc_per_node": WORLD,
                "timeout_s": TIMEOUT_S,
                "allreduce_mb": 1,
            },
            "resume": {"k": 2, "n": 2},
            # The sharded resume starts three new process groups (same size, 1 rank, 2 ranks): on
            # a loaded 2-core machine that can outlast the demo's 60 s ceiling.
            "limits": {"default": {"time_s": 300}},
            # Large enough that weights, gradients and Adam moments (~1.7 M parameters) stand out
            # of the per-process RSS noise, small enough for a CPU step in milliseconds.
            "task": {"options": {"d_model": 256}},
        },
    )
    raw["batch"].pop("replicas")  # replicas becomes the world size
    raw.pop("lr_board", None)
    raw["variants"] = [{"id": "fsdp", "strategy": "fsdp"}]
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


# What each step's line said while it ran (its PhaseProgress messages), by step.
SAID: dict[str, list[str]] = {}


def row_of(events: list[WireMessage]) -> dict[str, Any]:
    rows = [ev.row for ev in events if isinstance(ev, PhaseFinished)]
    assert len(rows) == 1
    return rows[0]


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Iterator[tuple[Session, dict[str, dict[str, Any]]]]:
    folder = tmp_path_factory.mktemp("distributed")
    session = Session(distributed_campaign(folder), folder / "records")
    session.start()
    rows: dict[str, dict[str, Any]] = {}

    def run(key: str, overrides: dict[str, Any] | None = None, name: str = "") -> None:
        t0 = time.perf_counter()
        events = list(session.run_step(key, overrides))
        rows[name or key] = row_of(events)
        SAID[name or key] = [ev.message for ev in events if isinstance(ev, PhaseProgress)]
        print(f"{name or key}: {time.perf_counter() - t0:.1f} s")  # where the test's time goes (-s)

    # The fsdp variant first, alone on the ranks (the comparison frees its state after its last
    # phase), then the control under ddp: every engine phase, its resume and the final reload.
    # On CPU a rank's RSS holds every state it keeps: this order makes the peaks comparable.
    order = sorted(session.steps, key=lambda s: (s.phase != "stack", s.variant == "control"))
    for step in order:
        if step.phase not in ("resume", "final"):
            run(step.key)
        if step.phase == "stack":
            run("load@fsdp")  # the variant's own load, so every engine phase runs under fsdp too
    run("resume")
    run("final")
    # The same engine phases under fsdp, beside the ddp control, and a resume under fsdp.
    for phase in ("save", "export"):
        run(f"{phase}@fsdp", name=f"{phase}@fsdp")
    # Under fsdp the checkpoint is sharded (torch.distributed.checkpoint) unless declared full:
    # the gathered full state dict's twin, then the sharded resume (bitwise, then resharded).
    run("save", {"strategy": "fsdp", "checkpoint": "full"}, name="save-full@fsdp")
    run("resume", {"strategy": "fsdp"}, name="resume@fsdp")
    # A rank that raises, dies or hangs fails its phase by name; the next step still runs, on a
    # fresh group each time (the next fault's own failure, then the steady below): one torchrun
    # start per fault, the cost of these tests.
    for kind in ("raise", "kill", "hang"):
        run("first_step", {"fault": {"rank": 1, "kind": kind}}, name=f"fault-{kind}")
    # A collate made slow on purpose (a test hook): the DataLoader's wait is measured and warned.
    # The step after the hang: it runs on the fresh group the hang left, and warns, never fails.
    run("steady", {"collate_delay_s": 0.05}, name="slow-collate")
    # The group that runs now started after the faults: its ranks never ran the export. The final
    # reload still finds it (the runner sends the ranks the rows they have not seen).
    run("final", name="final-after-restart")
    yield session, rows
    session.close()


def test_engine_phases_pass_on_two_ranks_with_per_rank_figures(ran):
    session, rows = ran
    for key in ("load", "first_step", "steady", "eval_longest", "save", "export"):
        row = rows[key]
        assert row["verdict"] in ("pass", "warn"), (key, row["reason"])
        p = row["params"]
        assert p["strategy"] == "ddp" and p["world_size"] == WORLD and p["backend"] == "gloo"
        assert p["effective_batch"] == p["microbatch"] * p["accumulation"] * WORLD == 8
        ranks = row["ranks"]
        assert [r["rank"] for r in ranks] == list(range(WORLD))
        assert all(r["peak_rss_mb"] > 0 and r["duration_s"] > 0 for r in ranks), ranks
        # The row's memory is the rank with the highest peak: the figure a GPU must hold.
        assert row["memory"]["peak_rss_mb"] == max(r["peak_rss_mb"] for r in ranks)
    steady = rows["steady"]
    assert all(r["step_time_s"] > 0 for r in steady["ranks"])
    assert steady["details"]["step_time_s"] == max(r["step_time_s"] for r in steady["ranks"])
    assert 0 <= steady["details"]["data_wait_share"] < 1
    # What the record holds is what the view was told, ranks included.
    data = tomllib.loads(session.record.path.read_text())
    recorded = next(r for r in data["phases"] if r["step"] == "steady")
    assert recorded["ranks"] == steady["ranks"]
    assert data["accounting"]["effective_batch"] == 8 and data["accounting"]["replicas"] == WORLD


def test_a_groups_start_says_what_it_waits_for(ran):
    # Two ranks each import torch and build the task before the first step runs on them: seconds
    # on CPU, minutes with a large script. The step's line says so (ctx.saying), once a second.
    starting = {k: m for k, said in SAID.items() for m in said if m.startswith("starting 2 ranks")}
    assert starting, SAID
    assert all(
        re.fullmatch(r"starting 2 ranks under torchrun: each imports torch and builds the task \(\d+ s\)", m)
        for m in starting.values()
    ), starting


def test_stack_measures_the_all_reduce_on_the_real_group(ran):
    _, rows = ran
    stack = rows["stack"]
    assert stack["verdict"] in ("pass", "warn"), stack["reason"]
    ic = stack["details"]["interconnect"]
    assert ic["ranks"] == WORLD and ic["backend"] == "gloo" and ic["size_mb"] == 1
    assert ic["busbw_gbps"] > 0 and ic["latency_us"] > 0
    # nccl-tests: busbw = algbw × 2(n-1)/n, and algbw = bytes / time.
    assert ic["busbw_gbps"] == pytest.approx(ic["algbw_gbps"] * 2 * (WORLD - 1) / WORLD, rel=1e-3)
    assert ic["algbw_gbps"] == pytest.approx(ic["size_mb"] * 2**20 / ic["time_s"] / 1e9, rel=1e-2)
    assert "bus" in stack["reason"]


def test_two_rank_loss_equals_one_rank_loss_of_the_same_global_batch(ran):
    """Normalisation is global: sum over both ranks / supervised targets of the whole update."""
    from pilot_tui.runner.context import RunContext
    from pilot_tui.runner.loop.training import train_update
    from pilot_tui.tasks.loader import load_task

    session, rows = ran
    loaded = session.loaded
    ctx = RunContext(loaded, load_task(loaded), __import__("torch").device("cpu"), lambda _m: None, Path("."))
    # One process, the same global batch: the accumulation absorbs the second rank.
    one = ctx.config()
    assert (one.microbatch, one.accumulation, one.replicas) == (2, 2 * WORLD, 1), one
    assert one.effective_batch == rows["first_step"]["params"]["effective_batch"]
    state = ctx.new_state(dataclasses.replace(one, strategy="none"))
    stats = train_update(state, ctx.task, ctx.device, loaded.spec.optim.grad_clip)
    first = rows["first_step"]["details"]
    assert stats.supervised == first["supervised_targets"]  # the all-reduced count
    assert float(stats.loss) == pytest.approx(first["loss"], rel=1e-6, abs=1e-7)
    assert float(stats.grad_norm) == pytest.approx(first["grad_norm"], rel=1e-5)


def test_fsdp_beside_ddp_holds_less_per_rank(ran):
    _, rows = ran
    for phase in ("first_step", "steady", "eval_longest"):
        fsdp, ddp = rows[f"{phase}@fsdp"], rows[phase]
        assert fsdp["verdict"] in ("pass", "warn"), (phase, fsdp["reason"])
        assert fsdp["params"]["strategy"] == "fsdp" and ddp["params"]["strategy"] == "ddp"
        # Each rank holds half the weights, gradients and Adam moments (one row per phase, per rank).
        for f, d in zip(fsdp["ranks"], ddp["ranks"], strict=True):
            assert f["state_mb"] < 0.7 * d["state_mb"], (phase, f, d)
    # And the peak each rank reached in its first optimizer step (Adam's moments allocated):
    # the worst fsdp rank stays below the best ddp rank.
    fsdp_peaks = [r["peak_rss_mb"] for r in rows["first_step@fsdp"]["ranks"]]
    ddp_peaks = [r["peak_rss_mb"] for r in rows["first_step"]["ranks"]]
    print(f"first_step peak RSS per rank: fsdp {fsdp_peaks} MiB, ddp {ddp_peaks} MiB")
    assert max(fsdp_peaks) < min(ddp_peaks), (fsdp_peaks, ddp_peaks)
    for phase in ("load", "save", "export"):
        assert rows[f"{phase}@fsdp"]["verdict"] == "pass", rows[f"{phase}@fsdp"]["reason"]


def test_resume_under_each_strategy_matches_in_a_new_process_group(ran):
    _, rows = ran
    for key, strategy in (("resume", "ddp"), ("resume@fsdp", "fsdp")):
        row = rows[key]
        assert row["verdict"] in ("pass", "warn"), (key, row["reason"])
        assert row["params"]["strategy"] == strategy
        d = row["details"]
        assert d["comparison"] == "bitwise" and d["first_difference"] is None
        assert all(c["ok"] for c in d["checks"].values()), d["checks"]
    assert rows["final"]["verdict"] == "pass", rows["final"]["reason"]
    assert rows["resume"]["details"]["checkpoint"] == "full"  # ddp: the gathered state dict


def test_fsdp_save_writes_each_ranks_shards_through_dcp_with_per_rank_figures(ran):
    session, rows = ran
    row = rows["save@fsdp"]
    assert row["verdict"] == "pass", row["reason"]
    d = row["details"]
    assert d["checkpoint"] == "sharded" and rows["save"]["details"]["checkpoint"] == "full"
    art = d["artifact"]
    folder = Path(art["path"])
    assert folder.is_dir() and art["format"] == "torch.distributed.checkpoint"
    names = sorted(p.name for p in folder.iterdir())
    # Each rank its own DCP shard file and its own non-tensor state; rank 0 the index.
    assert ".metadata" in names and {"rank0.pt", "rank1.pt"} <= set(names)
    assert any(n.startswith("__0_") for n in names) and any(n.startswith("__1_") for n in names)
    ranks = row["ranks"]
    assert all(r["save_s"] > 0 and r["written_mb"] > 0 for r in ranks), ranks
    # The row's save time is the slowest rank's (what the plan multiplies), its bytes the sum.
    assert d["save_s"] == max(r["save_s"] for r in ranks)
    assert d["written_mb"] == pytest.approx(sum(r["written_mb"] for r in ranks), abs=1e-3)
    assert art["size"] / 2**20 == pytest.approx(d["written_mb"], rel=1e-3)
    # Sharded: neither rank wrote the whole state, which the full kind's rank 0 did alone.
    full = rows["save-full@fsdp"]
    assert full["verdict"] == "pass" and full["details"]["checkpoint"] == "full"
    assert [r["written_mb"] > 0 for r in full["ranks"]] == [True, False]
    assert max(r["written_mb"] for r in ranks) < 0.75 * full["details"]["written_mb"]
    # The record holds the directory's provenance: one hash over every file.
    data = tomllib.loads(session.record.path.read_text())
    recorded = next(a for a in data["artifacts"] if a["path"] == art["path"])
    assert recorded["files"] == len(names) and len(recorded["sha256"]) == 64


def test_the_sharded_resume_also_resumes_on_one_rank_and_back_within_tolerance(ran):
    _, rows = ran
    d = rows["resume@fsdp"]["details"]
    assert d["checkpoint"] == "sharded"
    legs = {(leg["from_ranks"], leg["ranks"]): leg for leg in d["reshard"]}
    assert set(legs) == {(WORLD, 1), (1, WORLD)}, legs
    for leg in legs.values():
        print(
            f"resharded {leg['from_ranks']} -> {leg['ranks']}: loss Δ {leg['max_loss_diff']:.3g}, weights rel "
            f"{leg['weights_max_rel_diff']:.3g}, moments rel {leg['moments_max_rel_diff']:.3g}, {leg['seconds']} s"
        )
        assert leg["ok"] and all(leg["checks"].values()), leg
        # Another world size: the same state within tolerance, not necessarily bitwise.
        assert leg["weights_max_rel_diff"] < 1e-3 and leg["moments_max_rel_diff"] < 1e-3, leg
    assert "rank 0" in legs[(WORLD, 1)]["note"]


def test_a_slow_collate_shows_as_data_wait_on_every_rank_and_warns(ran):
    _, rows = ran
    slow, normal = rows["slow-collate"], rows["steady"]
    assert slow["details"]["loader"] == {"num_workers": 0, "pin_memory": False}
    # 50 ms per microbatch, 2 microbatches per rank and update, waited for in next(iterator): a
    # share of the update even where a loaded machine makes the compute slow (10 ms was 9 % there).
    assert slow["details"]["data_wait_s"] >= 0.1
    assert all(r["data_wait_share"] > 0.1 for r in slow["ranks"]), slow["ranks"]
    assert slow["details"]["data_wait_share"] > normal["details"]["data_wait_share"]
    assert slow["verdict"] == "warn" and "would wait for its data" in slow["reason"], slow["reason"]


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("raise", "RuntimeError: fault injected on rank 1"),
        ("kill", "killed by SIGKILL"),
        ("hang", "no progress for"),
    ],
)
def test_a_failing_rank_fails_the_phase_by_name_and_the_next_step_runs(ran, kind, cause):
    _, rows = ran
    row = rows[f"fault-{kind}"]
    assert row["verdict"] == "fail"
    assert f"rank 1: {cause}" in row["reason"] or f"rank 1 {cause}" in row["reason"], row["reason"]
    rank1 = row["ranks"][1]
    assert rank1["verdict"] == "fail" and cause.split(":")[-1].strip() in rank1["reason"], rank1
    # Bounded: the hang is named within a few collective timeouts (26 s seen on a loaded 2-core
    # machine), far below the phase's 300 s ceiling; the others faster.
    assert row["details"]["wall_s"] < (5 * TIMEOUT_S if kind == "hang" else 60)
    # The next step ran on a new group: the next fault failed for its own reason, and the
    # steady after the last one passed.
    after = {"raise": "fault-kill", "kill": "fault-hang", "hang": "slow-collate"}[kind]
    if after == "slow-collate":
        assert rows[after]["verdict"] in ("pass", "warn"), rows[after]["reason"]
    else:
        assert rows[after]["reason"] != row["reason"] and "rank 1" in rows[after]["reason"]


# ------------------------------------------------------------------ pure parts, no process group

TORCHRUN_FAILURE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
pilot_tui.runner.distributed.rank FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 20866)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 20866
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 20867)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 20867
=======================================================
"""


def test_torchruns_root_cause_names_the_first_failed_rank_not_the_ones_it_then_stopped():
    from pilot_tui.runner.distributed.group import root_cause

    assert root_cause(TORCHRUN_FAILURE) == (1, "killed by SIGKILL")
    assert root_cause(TORCHRUN_FAILURE.replace("-9 (pid", "3 (pid")) == (1, "exited with code 3")
    assert root_cause("no summary printed") is None


def test_merged_row_takes_the_worst_rank_verdict_and_the_highest_peak():
    from pilot_tui.core.steps import Step
    from pilot_tui.runner.distributed.launcher import merge_rows

    def rank_row(verdict: str, peak: float, step_s: float) -> dict[str, Any]:
        return {
            "verdict": verdict,
            "reason": f"{verdict} here",
            "duration_s": step_s * 10,
            "params": {"microbatch": 2},
            "memory": {"peak_rss_mb": peak},
            "details": {"step_time_s": step_s, "examples_per_s": 10.0},
        }

    results = {0: {"row": rank_row("pass", 300.0, 0.02)}, 1: {"row": rank_row("warn", 420.0, 0.05)}}
    row = merge_rows(Step.parse("steady"), results, {"world_size": 2}, "now")
    assert row["verdict"] == "warn" and row["reason"] == "rank 1: warn here"
    assert row["memory"]["peak_rss_mb"] == 420.0 and row["details"]["peak_rank"] == 1
    assert row["details"]["step_time_s"] == 0.05 and row["duration_s"] == 0.5
    assert row["details"]["examples_per_s"] == 20.0  # both ranks' examples
    assert [r["rank"] for r in row["ranks"]] == [0, 1] and row["ranks"][1]["reason"] == "warn here"


def test_bus_bandwidth_is_the_nccl_tests_definition():
    from pilot_tui.runner.distributed.interconnect import bus_bandwidth

    algbw, busbw = bus_bandwidth(8e9, 2.0, 8)
    assert algbw == 4.0 and busbw == pytest.approx(4.0 * 2 * 7 / 8)
    assert bus_bandwidth(1e9, 1.0, 2) == (1.0, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("seeded", [False, True])
def test_a_split_drawn_per_process_fails_first_step_naming_the_rank(tmp_path, seeded):
    raw = {
        "campaign": {"name": f"split-per-process-{seeded}"},
        "task": {
            "file": str(
                Path(__file__).resolve().parent.parent / "data" / "mistakes" / "split_per_process.py"
            ),
            "options": {"seeded": seeded},
        },
        "split": {"field": "split"},
        "batch": {"microbatch": 4, "accumulation": 1, "device": "cpu", "hold": "updates", "updates": 10},
        "distributed": {"strategy": "ddp", "nproc_per_node": WORLD, "timeout_s": TIMEOUT_S},
    }
    path = tmp_path / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    session = Session(path, tmp_path / "records")
    session.start()
    try:
        row = row_of(list(session.run_step("first_step")))
    finally:
        session.close()
    if seeded:
        assert row["verdict"] == "pass", row["reason"]
    else:
        # Two draws of 64 rows by the OS-seeded generator: they differ (the chance they agree is nil).
        assert row["verdict"] == "fail"
        assert "rank 1 sees another train / validation / test split than rank 0" in row["reason"], row[
            "reason"
        ]


def test_final_on_a_group_started_after_a_failure_finds_the_export(ran):
    _, rows = ran
    row = rows["final-after-restart"]
    assert row["verdict"] in ("pass", "warn"), row["reason"]
    assert "no exported artifact" not in row["reason"]
    # The newest export the campaign recorded (the fsdp variant's, exported after the control's).
    assert row["details"]["artifact"]["sha256"] == rows["export@fsdp"]["details"]["artifact"]["sha256"]
