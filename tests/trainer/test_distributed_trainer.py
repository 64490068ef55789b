"""A trainer script launched on 2 ranks with torchrun (gloo, CPU) under `[distributed]`: each
rank captures the same script, the trainer wraps its own model in DDP, rank 0 reports one row
per phase with each rank's figures; and the unchanged script whose `compute_loss` is right on one
process but 1/N of the intended on N ranks fails `first_step`."""

from __future__ import annotations

import pytest

from .conftest import run_campaign, run_in_process

pytestmark = pytest.mark.slow

WORLD = 2
# Only what DDP changes: the capture on every rank, the first update, the timed steady updates.
ON_RANKS = ["load", "first_step", "steady"]
OTHERS = [
    "stack", "estimate", "machine", "inspect", "split", "overfit", "eval_longest", "save", "export",
    "lr_run", "resume", "final",
]  # fmt: skip


def _distributed(skip: list[str]) -> dict:
    return {
        "phases": {"steady_updates": 2, "skip": skip},
        "distributed": {"strategy": "ddp", "nproc_per_node": WORLD, "backend": "gloo", "timeout_s": 60},
    }


def test_a_trainer_script_runs_its_phases_on_two_ranks(tiny, tmp_path):
    args = ["--model_name_or_path", str(tiny.model), "--train_file", str(tiny.text), "--output_dir", "out"]
    args += ["--do_train", "--do_eval", "--block_size", "32"]
    run = run_campaign(tmp_path, "hf_argparser.py", args, **_distributed(OTHERS))
    assert run.rc == 0, run.out
    assert run.verdicts() == dict.fromkeys(ON_RANKS, "pass"), run.out
    for name in ON_RANKS:
        row = run.row(name)
        assert row["params"]["world_size"] == WORLD and row["params"]["strategy"] == "ddp"
        assert [r["rank"] for r in row["ranks"]] == [0, 1]
        assert all(r["peak_rss_mb"] > 0 for r in row["ranks"]), row["ranks"]
    load = run.row("load")["details"]
    # The trainer itself saw the launch: 2 processes, and the CPU switch the pilot set, said so.
    assert load["trainer_world_size"] == WORLD and load["distributed_type"] == "MULTI_CPU"
    assert any("ACCELERATE_USE_CPU" in c for c in load["pilot_changed"])
    # Every rank built the same rows and weights (gathered at the capture).
    digests = load["rank_digests"]
    assert len(digests) == WORLD and digests[0] == digests[1]
    assert set(digests[0]["datasets"]) == {"train_dataset", "eval_dataset"}
    first = run.row("first_step")["details"]
    assert first["trained_as"] == "DistributedDataParallel"
    assert first["rank_loss_scale"]["scale"] == pytest.approx(1.0, abs=1e-4)
    steady = run.row("steady")
    per_rank = [r["step_time_s"] for r in steady["ranks"]]
    assert all(t > 0 for t in per_rank)
    # The pace is the slowest rank's: the ranks step together.
    assert steady["details"]["step_time_s"] == pytest.approx(max(per_rank))


def test_a_loss_divided_by_every_ranks_tokens_fails_first_step(tiny, tmp_path):
    """plain_trainer.py, unchanged: its compute_loss divides by num_items_in_batch, which the
    trainer counts over every rank, and never multiplies by the number of processes."""
    args = ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]
    run = run_in_process(tmp_path, "plain_trainer.py", args, **_distributed([*OTHERS, "steady"]))
    assert run.rc != 0
    assert run.verdicts() == {"load": "pass", "first_step": "fail"}, run.out
    row = run.row("first_step")
    assert "0.5 × their one-process loss" in row["reason"], row["reason"]
    assert "compute_loss divides by num_items_in_batch" in row["reason"]
    scale = row["details"]["rank_loss_scale"]
    assert scale["loss_on_ranks"] == pytest.approx(scale["loss_one_process"] / WORLD, rel=1e-5)
