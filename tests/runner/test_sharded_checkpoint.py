"""FSDP2 checkpoints sharded the way the real run saves them, on 2 ranks under torchrun (gloo, CPU):
`save` writes through torch.distributed.checkpoint with per-rank bytes and time, `resume` reads it
in a new process group bitwise, then on 1 rank and back on 2 (resharded) within tolerance (R28).

One Session (one torchrun group) for the whole module: the group's start-up is the cost.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.events import PhaseFinished
from pilot_tui.session.driver import Session

pytestmark = pytest.mark.slow
WORLD = 2


def fsdp_campaign(folder: Path, checkpoint: str = "") -> Path:
    raw = deep_merge(demo_raw(), FAST)
    distributed: dict[str, Any] = {
        "strategy": "fsdp",
        "nproc_per_node": WORLD,
        "timeout_s": 20,
        "allreduce_mb": 1,
    }
    if checkpoint:
        distributed["checkpoint"] = checkpoint
    raw = deep_merge(
        raw,
        {
            "phases": {"skip": ["inspect", "split", "overfit", "lr_run"], "steady_updates": 2},
            "distributed": distributed,
            "resume": {"k": 2, "n": 2},
            # The resume starts three new process groups (same size, 1 rank, 2 ranks): on a
            # loaded 2-core machine that can outlast the demo's 60 s ceiling.
            "limits": {"default": {"time_s": 300}},
        },
    )
    raw["batch"].pop("replicas")
    raw.pop("lr_board", None)
    raw.pop("variants", None)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Iterator[tuple[Session, dict[str, dict[str, Any]]]]:
    folder = tmp_path_factory.mktemp("sharded")
    session = Session(fsdp_campaign(folder), folder / "records")
    session.start()
    rows: dict[str, dict[str, Any]] = {}

    def run(key: str, overrides: dict[str, Any] | None = None, name: str = "") -> None:
        found = [ev.row for ev in session.run_step(key, overrides) if isinstance(ev, PhaseFinished)]
        rows[name or key] = found[0]

    for key in ("load", "first_step", "save"):
        run(key)
    run("save", {"checkpoint": "full"}, name="save-full")
    run("resume")
    yield session, rows
    session.close()


def test_save_writes_each_ranks_shards_through_dcp_with_per_rank_figures(ran):
    session, rows = ran
    row = rows["save"]
    assert row["verdict"] == "pass", row["reason"]
    d = row["details"]
    assert d["checkpoint"] == "sharded"
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
    # Sharded: neither rank wrote the whole state.
    full = rows["save-full"]
    assert full["verdict"] == "pass" and full["details"]["checkpoint"] == "full"
    assert max(r["written_mb"] for r in ranks) < 0.75 * full["details"]["written_mb"]
    # The record holds the directory's provenance: one hash over every file.
    data = tomllib.loads(session.record.path.read_text())
    recorded = next(a for a in data["artifacts"] if a["path"] == art["path"])
    assert recorded["files"] == len(names) and len(recorded["sha256"]) == 64


def test_sharded_resume_is_bitwise_in_a_new_group_and_reshards_within_tolerance(ran):
    _, rows = ran
    row = rows["resume"]
    assert row["verdict"] in ("pass", "warn"), row["reason"]
    d = row["details"]
    assert d["checkpoint"] == "sharded" and d["comparison"] == "bitwise" and d["first_difference"] is None
    legs = {(leg["from_ranks"], leg["ranks"]): leg for leg in d["reshard"]}
    assert set(legs) == {(WORLD, 1), (1, WORLD)}, legs
    for leg in legs.values():
        print(
            f"resharded {leg['from_ranks']} -> {leg['ranks']}: loss Δ {leg['max_loss_diff']:.3g}, weights rel "
            f"{leg['weights_max_rel_diff']:.3g}, moments rel {leg['moments_max_rel_diff']:.3g}, {leg['seconds']} s"
        )
        assert leg["ok"], leg
        assert all(leg["checks"].values()), leg
        # Another world size: the same state within tolerance, not necessarily bitwise.
        assert leg["weights_max_rel_diff"] < 1e-3 and leg["moments_max_rel_diff"] < 1e-3, leg
    assert "rank 0" in legs[(WORLD, 1)]["note"]
