"""Resume in a new process and final reload (R15, R16), with real torch on CPU.

One runner serves the whole module: the resume check passes, then fails when the scheduler or
the data position is deliberately lost; export + final reload pass, then refuse a tampered file.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
import torch
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.analysis.plan import read_facts
from pilot_tui.analysis.plan.rental import restart
from pilot_tui.runner.loop.data import UpdateSampler
from pilot_tui.runner.loop.resume_check import compare
from pilot_tui.session.driver import Session

# 88 training examples / (8 × 2) = 5 updates per epoch: resuming after 4 and training 3 more
# crosses the epoch boundary, as the demo's k = 20, n = 8 does with its 23 updates per epoch.
RESUME = {"batch": {"microbatch": 8, "accumulation": 2}, "resume": {"k": 4, "n": 3}}


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Iterator[Session]:
    folder = tmp_path_factory.mktemp("resume")
    spec = folder / "campaign.toml"
    spec.write_text(tomli_w.dumps(deep_merge(deep_merge(demo_raw(), FAST), RESUME)))
    # One torch thread in the runner (and so in its fresh processes, which copy the runner's count):
    # with other test processes on the same cores, busy OpenMP threads slow each other down many
    # times over. The comparison stays bitwise either way.
    env = pytest.MonkeyPatch()
    env.setenv("OMP_NUM_THREADS", "1")
    s = Session(spec, folder / "records")
    try:
        s.start()
        yield s
    finally:
        s.close()
        env.undo()


def run(session: Session, key: str, overrides: dict | None = None) -> dict:
    for _ in session.run_step(key, overrides):
        pass
    assert session.record is not None
    # What lasts is the file: read the row back from disk.
    return tomllib.loads(session.record.path.read_text())["phases"][-1]


def test_resume_in_a_new_process_matches_the_uninterrupted_run(session):
    row = run(session, "resume")
    d = row["details"]
    assert row["verdict"] == "pass", row["reason"]
    assert d["crosses_epoch_boundary"] and d["epochs_after_resume"] == [0, 1]
    assert d["updates_per_epoch"] == 5
    assert d["comparison"] == "bitwise"
    assert d["new_process"]["threads"] == 1  # the fresh process ran with the runner's thread count
    checks = d["checks"]
    for name in (
        "step_counter",
        "lr_per_step",
        "batch_ids",
        "loss_per_step",
        "final_step",
        "weights",
        "optimizer_moments",
        "next_random_draw",
    ):
        assert checks[name]["ok"], name
    assert checks["loss_per_step"]["compared"] == 3 and checks["loss_per_step"]["max_abs_diff"] == 0.0
    assert checks["final_step"] == {"ok": True, "uninterrupted": 7, "resumed": 7}
    assert checks["optimizer_moments"]["tensors"] > checks["weights"]["tensors"]
    # The new process jumped to the saved position: 3 batches drawn, the 4 consumed ones never.
    assert d["resumed_at"] == d["saved_position"] == {"epoch": 0, "position": 4, "seed": 0}
    assert d["batches_drawn_after_resume"] == 3
    assert [u["update"] for u in d["per_update"]] == [5, 6, 7]
    # The skip a loader-iterating resume would pay, timed: the k = 4 updates' 2 microbatches each.
    assert (d["skip_updates"], d["skip_microbatches"], d["skip_examples"]) == (4, 8, 64)
    assert 0 < d["skip_s"] < row["duration_s"]
    # ...and the plan's restart is built from this real row: a 100-update run, 4 saves.
    again = restart(read_facts(tomllib.loads(session.record.path.read_text())), 100, 1.0, 16, 0.1, 4)
    assert again is not None and again.skip_s is not None
    assert 0 < again.process_s <= d["new_process"]["seconds"]
    assert again.skip_examples == 50 * 16 and again.redo_s == pytest.approx(25 / 2 * 0.1)
    assert all(u["loss"] == u["loss_resumed"] and u["same_batch"] for u in d["per_update"])
    # The checkpoint is in the record with its hash, before anything loads it.
    artifacts = tomllib.loads(session.record.path.read_text())["artifacts"]
    ckpt = next(a for a in artifacts if a["kind"] == "resume_checkpoint")
    assert ckpt == d["artifact"] and len(ckpt["sha256"]) == 64 and Path(ckpt["path"]).is_file()


def test_a_lost_scheduler_state_fails_at_the_second_update_after_resume(session):
    row = run(session, "resume", {"break_resume": "scheduler"})
    d = row["details"]
    assert row["verdict"] == "fail"
    # Update 5 still uses the LR the optimizer saved; the restarted schedule shows at update 6.
    assert d["first_difference"]["update"] == 6
    assert d["first_difference"]["quantity"] == "learning rate"
    assert "first at update 6: learning rate" in row["reason"]
    assert d["checks"]["lr_per_step"]["ok"] is False and d["checks"]["batch_ids"]["ok"] is True


def test_a_reset_data_position_fails_at_the_first_update_after_resume(session):
    row = run(session, "resume", {"break_resume": "data"})
    d = row["details"]
    assert row["verdict"] == "fail"
    assert d["first_difference"]["update"] == 5
    assert d["first_difference"]["quantity"] == "batch ids"
    assert "first at update 5: batch ids" in row["reason"]
    assert d["resumed_at"]["position"] == 0  # what the broken checkpoint said
    # A new file for every attempt: the recorded checkpoints of earlier attempts stay as they were.
    assert d["artifact"]["path"].endswith("-broken-data.pt") and d["artifact"]["broken"] == "data"


def test_final_reload_replays_the_control_inputs_then_refuses_a_tampered_artifact(session):
    assert run(session, "first_step")["verdict"] == "pass"
    export = run(session, "export")
    assert export["verdict"] == "pass", export["reason"]
    row = run(session, "final")
    assert row["verdict"] == "pass", row["reason"]
    d = row["details"]
    assert d["artifact"] == export["details"]["artifact"] and d["sha256_verified"]
    inputs = [c["input"] for c in d["replays"]]
    assert inputs == session.spec.replay.inputs and len(inputs) == 3
    for c in d["replays"]:
        assert c["same"] and c["before"] == c["after"] and c["max_abs_logit_diff"] == 0.0
        assert c["before"]  # a decoded text, not an empty string
    # One byte changed in the exported file: the fresh process refuses it by hash.
    path = Path(d["artifact"]["path"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    row = run(session, "final")
    assert row["verdict"] == "fail"
    assert "refused the artifact" in row["reason"] and "sha256" in row["reason"]


def test_a_resumed_sampler_jumps_to_its_position_without_iterating_consumed_batches():
    indices = list(range(100))
    straight = UpdateSampler(indices, microbatch=4, accumulation=2, seed=7)  # 12 updates per epoch
    seen = [straight.next_update() for _ in range(30)]
    resumed = UpdateSampler(indices, microbatch=4, accumulation=2, seed=7)
    shuffled_epochs: list[int] = []
    order = resumed._order

    def counting_order(epoch: int) -> list[int]:
        shuffled_epochs.append(epoch)
        return order(epoch)

    resumed._order = counting_order  # counts the real method's calls; the result is untouched
    resumed.load_state_dict({"epoch": 2, "position": 1, "seed": 7})  # after 25 updates
    after = [resumed.next_update() for _ in range(5)]
    assert after == seen[25:30]
    # Only the current epoch's order was built, once per update: epochs 0 and 1 never were.
    assert set(shuffled_epochs) == {2} and len(shuffled_epochs) == 5
    with pytest.raises(ValueError, match="seed"):
        resumed.load_state_dict({"epoch": 0, "position": 0, "seed": 8})


def _steps(losses, lrs=None, batches=None):
    return [
        {
            "step": i + 1,
            "lr": (lrs or [1e-3] * len(losses))[i],
            "batch": (batches or [[i]] * len(losses))[i],
            "loss": x,
            "epoch": 0,
        }
        for i, x in enumerate(losses)
    ]


def test_compare_names_the_first_differing_update_and_quantity():
    t = {"model/w": torch.ones(3), "optim/0/exp_avg": torch.zeros(3), "draw/torch": torch.zeros(4)}
    same = compare(_steps([1.0, 0.9]), _steps([1.0, 0.9]), t, dict(t), 0.5, 0.5, 0.0)
    assert same.ok and same.reason() == ""
    loss = compare(_steps([1.0, 0.9, 0.8]), _steps([1.0, 0.9000001, 0.7]), t, dict(t), 0.5, 0.5, 0.0)
    assert loss.first["update"] == 2 and loss.first["quantity"] == "loss"
    # Within a declared tolerance (GPU), the small difference passes and the large one does not.
    near = compare(_steps([1.0, 0.9]), _steps([1.0, 0.9000001]), t, dict(t), 0.5, 0.5, 1e-4)
    assert near.ok
    moved = dict(t) | {"optim/0/exp_avg": torch.tensor([0.0, 1e-3, 0.0])}
    late = compare(_steps([1.0]), _steps([1.0]), t, moved, 0.5, 0.5, 0.0)
    assert late.first["quantity"] == "optimizer moments" and "exp_avg" in late.reason()
    draw = compare(_steps([1.0]), _steps([1.0]), t, dict(t), 0.5, 0.25, 0.0)
    assert draw.first["quantity"] == "next random draw"
    nan = compare(_steps([math.nan]), _steps([math.nan]), t, dict(t), 0.5, 0.5, 0.0)
    assert nan.ok  # a NaN on both sides is the same NaN; the gates of other phases judge it
