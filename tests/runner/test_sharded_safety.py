"""A sharded checkpoint is loaded only as the record vouches for it, and only as tensors (R17, R28).

One process, no process group: DCP saves and loads there too, so these run in a second.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.hashing import artifact_entry
from pilot_tui.core.spec import parse_spec
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.distributed.sharded import verify_sharded
from pilot_tui.runner.loop.checkpoint import resume_from, save_training_state
from pilot_tui.runner.loop.resume_check import final_tensors, observe_update
from pilot_tui.runner.safe_load import UnsafeLoadError
from pilot_tui.tasks.loader import load_task


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    import tomli_w

    text = tomli_w.dumps(deep_merge(demo_raw(), FAST))
    loaded = parse_spec(text, tmp_path / "campaign.toml")
    return RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda _m: None, tmp_path)


def saved(ctx: RunContext, name: str = "ck.dcp"):
    state = ctx.new_state(ctx.config())
    for _ in range(2):
        observe_update(state, ctx.task, ctx.device, 1.0)
    path = ctx.work_dir / name
    figures = save_training_state(state, path, "sharded")
    return state, path, artifact_entry(path, "training_checkpoint"), figures


def test_a_sharded_checkpoint_resumes_bitwise_and_the_next_updates_match(ctx):
    state, path, entry, figures = saved(ctx)
    assert figures["written_mb"] * 2**20 == pytest.approx(entry["size"], rel=1e-3) and figures["save_s"] > 0
    assert verify_sharded(state, path, entry) == []
    fresh = ctx.new_state(ctx.config())
    assert resume_from(fresh, path, entry)["step"] == 2 == fresh.step
    a, b = final_tensors(state), final_tensors(fresh)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ahead = [observe_update(s, ctx.task, ctx.device, 1.0)["loss"] for s in (state, fresh)]
    assert ahead[0] == ahead[1]


def test_a_changed_shard_or_an_extra_file_is_refused_before_reading(ctx):
    _, path, entry, _ = saved(ctx)
    shard = next(path.glob("__0_*.distcp"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(UnsafeLoadError, match="a shard changed"):
        resume_from(ctx.new_state(ctx.config()), path, entry)
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    (path / "extra.bin").write_bytes(b"x")
    with pytest.raises(UnsafeLoadError, match="files where the record holds"):
        resume_from(ctx.new_state(ctx.config()), path, entry)


def test_dcp_metadata_asking_for_code_is_refused_even_with_a_recorded_hash(ctx):
    _, path, _, _ = saved(ctx)

    class Evil:
        def __reduce__(self):
            return (print, ("this ran",))

    (path / ".metadata").write_bytes(pickle.dumps(Evil()))
    entry = artifact_entry(path, "training_checkpoint")  # provenance holds: the content does not
    with pytest.raises(UnsafeLoadError, match=r"builtins\.print"):
        resume_from(ctx.new_state(ctx.config()), path, entry)


def test_a_dcp_checkpoint_holding_a_non_tensor_item_is_refused(ctx, tmp_path):
    import torch.distributed.checkpoint as dcp

    _, path, _, _ = saved(ctx)
    other = tmp_path / "bytes.dcp"
    # Same tensors plus one object DCP would unpickle with weights_only=False on load.
    dcp.save(
        {"model": {"w": torch.ones(2)}, "optim": {}, "obj": {"x": [1, 2]}},
        checkpoint_id=str(other),
        no_dist=True,
    )
    for f in path.glob("rank*.pt"):
        (other / f.name).write_bytes(f.read_bytes())
    entry = artifact_entry(other, "training_checkpoint")
    with pytest.raises(UnsafeLoadError, match="is not a tensor"):
        resume_from(ctx.new_state(ctx.config()), other, entry)


def test_a_resume_at_another_world_size_passes_within_tolerance_and_fails_beyond_it():
    """The resharded legs' comparison: float noise of another reduction order passes, a real
    difference (a restarted schedule, a perturbed moment) fails and is named."""
    from pilot_tui.runner.loop.resume_check import RESHARD_RTOL, compare

    ref = [{"step": 3, "lr": 1e-3, "batch": [1, 2], "loss": 2.5, "epoch": 0}]
    tensors = {"model/w": torch.linspace(-1, 1, 8), "optim/w/exp_avg": torch.full((8,), 1e-4)}
    close = {k: v * (1 + 1e-6) for k, v in tensors.items()}
    same = compare(
        ref, [ref[0] | {"loss": 2.5 * (1 + 1e-7)}], tensors, close, 0.0, 0.5, RESHARD_RTOL, draws=False
    )
    assert same.ok, same.reason()
    restarted = compare(ref, [ref[0] | {"lr": 1e-4}], tensors, close, 0.0, 0.0, RESHARD_RTOL, draws=False)
    assert not restarted.ok and "learning rate" in restarted.reason()
    off = dict(close) | {"optim/w/exp_avg": tensors["optim/w/exp_avg"] * 1.01}
    moved = compare(ref, ref, tensors, off, 0.0, 0.0, RESHARD_RTOL, draws=False)
    assert not moved.ok and "optimizer moments" in moved.reason()
