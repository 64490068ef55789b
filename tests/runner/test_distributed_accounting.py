"""`[distributed]` in the campaign file and the world-size rule (R22), and the sharded update
sampler: pure, no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.spec import SpecError, parse_spec
from pilot_tui.runner.loop.data import UpdateSampler


def spec_text(changes: dict, drop_replicas: bool = True) -> str:
    raw = deep_merge(deep_merge(demo_raw(), FAST), changes)
    if drop_replicas:
        raw["batch"].pop("replicas")
    return tomli_w.dumps(raw)


def test_nproc_per_node_becomes_the_replicas_of_the_accounting():
    spec = parse_spec(
        spec_text({"distributed": {"strategy": "fsdp", "nproc_per_node": 4}}), Path("c.toml")
    ).spec
    assert spec.batch.replicas == 4 and spec.distributed.strategy == "fsdp"
    # And the other way round: replicas alone sets the world size.
    spec = parse_spec(
        spec_text({"distributed": {"strategy": "ddp"}, "batch": {"replicas": 2}}, False), Path("c.toml")
    ).spec
    assert spec.distributed.nproc_per_node == 2 and spec.batch.replicas == 2
    assert parse_spec(spec_text({}), Path("c.toml")).spec.distributed.strategy == "none"
    # Several nodes: the world is every rank of every node.
    two_nodes = {"strategy": "ddp", "nproc_per_node": 2, "nnodes": 2, "rdzv_endpoint": "10.0.0.1:29400"}
    spec = parse_spec(spec_text({"distributed": two_nodes}), Path("c.toml")).spec
    assert spec.batch.replicas == 4 and spec.distributed.world == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"distributed": {"strategy": "ddp", "nproc_per_node": 2}, "batch": {"replicas": 4}},
            "batch.replicas: is 4 but distributed.nproc_per_node is 2",
        ),
        ({"batch": {"replicas": 2}}, "batch.replicas: replicas > 1 needs [distributed] strategy"),
        ({"distributed": {"strategy": "zero3"}}, "distributed.strategy: must be one of none, ddp, fsdp"),
        (
            {"distributed": {"strategy": "ddp", "backend": "mpi"}},
            "distributed.backend: must be 'nccl' or 'gloo'",
        ),
        ({"distributed": {"strategy": "ddp", "timeout_s": 0}}, "distributed.timeout_s: must be > 0"),
        (
            {"distributed": {"nproc_per_node": 2}},
            "distributed.nproc_per_node: several processes need strategy",
        ),
        (
            {"variants": [{"id": "f", "strategy": "fsdp"}]},
            "variants[0].strategy: needs [distributed] strategy",
        ),
        (
            {"distributed": {"strategy": "ddp"}, "variants": [{"id": "f", "strategy": "zero"}]},
            "variants[0].strategy: must be one of none, ddp, fsdp, got 'zero'",
        ),
        (
            {"distributed": {"strategy": "ddp"}, "variants": [{"id": "f", "strategy": "none"}]},
            "variants[0].strategy: must be 'ddp' or 'fsdp'",
        ),
        ({"batch": {"num_workers": -1}}, "batch.num_workers: must be ≥ 0"),
        (
            {"distributed": {"strategy": "fsdp", "checkpoint": "dcp"}},
            "distributed.checkpoint: must be 'sharded' or 'full'",
        ),
        (
            {"distributed": {"strategy": "ddp", "nnodes": 2}},
            "distributed.rdzv_endpoint: must be 'host:port'",
        ),
        (
            {"distributed": {"strategy": "ddp", "nnodes": 2, "rdzv_endpoint": "node0"}},
            "distributed.rdzv_endpoint: must be 'host:port'",
        ),
        (
            {"distributed": {"nnodes": 2, "rdzv_endpoint": "node0:29400"}},
            "distributed.nnodes: several nodes need strategy",
        ),
        (
            {
                "distributed": {"strategy": "ddp", "nproc_per_node": 2, "nnodes": 2, "rdzv_endpoint": "n:1"},
                "batch": {"replicas": 2},
            },
            "batch.replicas: is 2 but distributed.nproc_per_node is 2 × nnodes 2",
        ),
    ],
)
def test_bad_distributed_keys_name_the_key_and_the_line(changes, message):
    with pytest.raises(SpecError) as err:
        parse_spec(
            spec_text(changes, drop_replicas="replicas" not in changes.get("batch", {})), Path("c.toml")
        )
    text = str(err.value)
    assert message in text and text.startswith("c.toml: ") and "\n" not in text
    assert "line " in text or "variants[0]" in text  # the line of the key when it can be found


def test_inconsistent_replicas_exit_2_from_the_cli(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        spec_text({"distributed": {"strategy": "ddp", "nproc_per_node": 2}, "batch": {"replicas": 3}}, False)
    )
    out = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(path), "--headless", "--records", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "batch.replicas" in out.stderr and "nproc_per_node" in out.stderr


def test_two_ranks_share_exactly_the_one_rank_update():
    """The same global batch: what rank 0 and rank 1 draw together is what one process draws with
    the accumulation doubled, update after update, across the epoch boundary."""
    indices = list(range(37))
    one = UpdateSampler(indices, 2, 4, seed=3)
    ranks = [UpdateSampler(indices, 2, 2, seed=3, replicas=2, rank=r) for r in range(2)]
    assert one.updates_per_epoch == ranks[0].updates_per_epoch == 4
    for _ in range(9):
        whole = [i for m in one.next_update() for i in m]
        shares = [[i for m in s.next_update() for i in m] for s in ranks]
        assert shares[0] + shares[1] == whole and not set(shares[0]) & set(shares[1])
    # Positions count global updates: a checkpoint taken on 2 ranks resumes on 1 at the same place.
    assert ranks[0].state_dict() == ranks[1].state_dict() == one.state_dict()
