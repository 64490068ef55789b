"""Effective batch accounting (R8, R9): pure arithmetic, no torch.

These numbers say how many examples each update combines and how many updates a budget means.
They predict neither duration nor quality.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Accounting:
    """Examples per update and what a fixed budget implies."""

    microbatch: int
    accumulation: int
    replicas: int
    effective_batch: int
    dataset_size: int
    hold: str
    updates: int
    epochs: float
    examples_seen: int
    updates_per_epoch: int
    incomplete_batch: str
    incomplete_examples: int
    note: str
    # Whether an epoch's incomplete last batch is dropped (the plan recounts a run with it).
    drop_last: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def account(
    *,
    microbatch: int,
    accumulation: int,
    replicas: int,
    dataset_size: int,
    hold: str,
    updates: int = 0,
    epochs: int = 0,
    drop_last: bool = True,
) -> Accounting:
    """Effective batch = microbatch × accumulation × data-parallel replicas.

    `hold` says which quantity the campaign fixes; the other one is derived and shown (R9). The
    incomplete last batch of an epoch is either dropped or kept and normalised by its own size.
    """
    if min(microbatch, accumulation, replicas) < 1:
        raise ValueError("microbatch, accumulation and replicas must be ≥ 1")
    if dataset_size < 0:
        raise ValueError("dataset_size must be ≥ 0")
    eff = microbatch * accumulation * replicas
    remainder = dataset_size % eff
    if drop_last:
        per_epoch = dataset_size // eff
        used_per_epoch = per_epoch * eff
        incomplete = "dropped" if remainder else "none"
    else:
        per_epoch = math.ceil(dataset_size / eff)
        used_per_epoch = dataset_size
        incomplete = "kept, normalised by its own supervised count" if remainder else "none"

    if hold == "epochs":
        if epochs < 1:
            raise ValueError("hold = 'epochs' needs epochs ≥ 1")
        n_updates = per_epoch * epochs
        seen = used_per_epoch * epochs
        n_epochs = float(epochs)
        note = f"epochs fixed at {epochs}: changing the batch changes the number of updates ({n_updates})"
    elif hold == "updates":
        if updates < 1:
            raise ValueError("hold = 'updates' needs updates ≥ 1")
        n_updates = updates
        if drop_last or not per_epoch:
            seen = updates * eff
        else:
            # Kept incomplete batches close each epoch; the rest of the updates are full batches.
            full_epochs, rest = divmod(updates, per_epoch)
            seen = full_epochs * dataset_size + rest * eff
        n_epochs = seen / used_per_epoch if used_per_epoch else math.inf
        note = f"updates fixed at {updates}: changing the batch changes the examples seen ({seen})"
    else:
        raise ValueError(f"unknown hold {hold!r}")
    return Accounting(
        microbatch=microbatch,
        accumulation=accumulation,
        replicas=replicas,
        effective_batch=eff,
        dataset_size=dataset_size,
        hold=hold,
        updates=n_updates,
        epochs=round(n_epochs, 6),
        examples_seen=seen,
        updates_per_epoch=per_epoch,
        incomplete_batch=incomplete,
        incomplete_examples=remainder,
        drop_last=drop_last,
        note=note,
    )
