"""A captured trainer on every rank of a torchrun group: what the ranks must agree on.

Every rank runs the user's script on its own, so every rank builds its own datasets and its own
model. The trainer's sampler deals one index order out to the ranks, so each rank must hold the
same rows in the same order (a split seeded per rank leaks one rank's eval rows into another's
train); the weights must be the same too, since the pilot puts the captured weights back before
each run and DDP broadcasts rank 0's only once, when it first wraps the model. Checked once, when
the rank opens the campaign (a collective, so every rank does it at the same point), and
reported by the gates that train.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist

from ...context import PhaseFailure, RunContext
from ...distributed import state as dist_state
from .captured import INITIAL, adapter_of, trainer_of
from .loop import restore, unwrapped

AGREEMENT = "trainer_ranks_agree"  # ctx.memo key: {"problem": str, "notes": [...], ...}


def rows_digest(rows: Any) -> str:
    """One hash of a dataset's rows in order (the trainer's sampler deals indices, not rows)."""
    if rows is None:
        return "-"
    h = hashlib.sha256()
    for i in range(len(rows)):
        row = rows.dataset[i]
        for key, value in sorted(row.items()) if isinstance(row, dict) else [("", row)]:
            h.update(str(key).encode() + b"\0")
            # A tensor's repr elides its middle: its bytes instead.
            h.update(_bytes(value) if isinstance(value, torch.Tensor) else repr(value).encode())
    return h.hexdigest()[:16]


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(_bytes(weights[name]))
    return h.hexdigest()[:16]


def _bytes(t: torch.Tensor) -> bytes:
    # Any dtype (bf16 has no numpy twin) and any shape (a 0-d tensor cannot change its dtype's size).
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _broadcast_weights(ctx: RunContext) -> None:
    """Rank 0's captured weights on every rank, as DDP does when it wraps the model."""
    saved: dict[str, torch.Tensor] = ctx.memo[INITIAL]
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    for name in sorted(saved):
        t = saved[name] if on is None else saved[name].to(on)
        dist.broadcast(t, src=0)
        if on is not None:
            saved[name].copy_(t.cpu())
    restore(unwrapped(trainer_of(ctx)), saved)


def dataset_digests(adapter: Any) -> dict[str, str]:
    """Each of the trainer's datasets by the name the script gave it, hashed."""
    out = {"train_dataset": rows_digest(adapter.train)}
    for key, rows in adapter.eval_sets.values():
        out["eval_dataset" if key is None else f"eval_dataset[{key!r}]"] = rows_digest(rows)
    return out


def disagreement(every: list[dict[str, Any]]) -> tuple[str, list[int]]:
    """From each rank's digests ({"datasets": {name: digest}, "weights": digest}): the sentence
    naming the ranks whose datasets differ from rank 0's ('' when none), and the ranks whose
    initial weights do."""
    names = sorted({n for d in every for n in d["datasets"]}, key=lambda n: (n != "train_dataset", n))
    differ = {
        n: [r for r, d in enumerate(every) if d["datasets"].get(n) != every[0]["datasets"].get(n)]
        for n in names
    }
    bad = sorted({r for ranks in differ.values() for r in ranks})
    problem = ""
    if bad:
        which = " and ".join(n for n, ranks in differ.items() if ranks)
        problem = (
            f"rank {', '.join(map(str, bad))} built another {which} than rank 0 (its rows or their order): a "
            "split or shuffle seeded per rank (set_seed(seed + rank) before train_test_split?); each rank "
            "takes its share of one index order, so rows are skipped, repeated, or eval rows trained on"
        )
    weights = [r for r, d in enumerate(every) if d["weights"] != every[0]["weights"]]
    return problem, weights


def check_ranks_agree(ctx: RunContext) -> None:
    """Gather each rank's dataset and weight digests; remember what differs from rank 0's."""
    if dist_state.world() < 2:
        return
    mine = {"datasets": dataset_digests(adapter_of(ctx)), "weights": weights_digest(ctx.memo[INITIAL])}
    every: list[Any] = [None] * dist_state.world()
    dist.all_gather_object(every, mine)
    problem, differ = disagreement(every)
    notes = []
    if differ:
        _broadcast_weights(ctx)
        notes.append(
            f"rank {', '.join(map(str, differ))} built other initial weights than rank 0 (a layer initialised "
            "randomly after a per-rank seed?): every rank starts from rank 0's, as DDP does"
        )
    ctx.memo[AGREEMENT] = {"problem": problem, "notes": notes, "digests": every}


def require_agreement(ctx: RunContext) -> dict[str, Any]:
    """The training gates' precondition on several ranks: the same data everywhere. Returns what
    the row records of the check ({} on one process)."""
    found = ctx.memo.get(AGREEMENT)
    if not found:
        return {}
    details = {"rank_digests": found["digests"]} | ({"rank_notes": found["notes"]} if found["notes"] else {})
    if found["problem"]:
        raise PhaseFailure(found["problem"], details)
    return details
