"""Packed documents that see each other (R26): measured, not inferred from the mask.

A collator that packs several documents into one row saves padding; unless the attention stops
at each document's end (a block-diagonal mask, or position restarts a packed-sequence kernel
reads), a document's tokens attend to the one before it and the model learns from context it will
never have when served. Found by what the collator does: a microbatch of k examples that comes
back as fewer than k rows is packed. Then each document placed after another in its row is run
alone (the same collator, one example) and inside the pack, in evaluation mode on the same
weights: the per-token losses of its supervised targets must match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ...tasks.contract import CAUSAL_LM, Task
from . import objective

# Per-token loss difference (nats) beyond float32 noise: attention that reaches another document
# moves it by far more (0.05 and up on the suite's tiny Llama).
TOLERANCE = 1e-3


def _token_losses(task: Task, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[rows, length] loss of each position's next-token target (0 where it is not scored)."""
    logits = objective.forward(task, model, batch).float()
    labels = F.pad(batch["labels"][:, 1:], (0, 1), value=task.ignore_index)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=task.ignore_index,
        reduction="none",
    )
    return loss.reshape(labels.shape)


def _locate(row: torch.Tensor, doc: torch.Tensor) -> int | None:
    """The offset (≥ 1) where `doc` sits in `row` after something else, or None."""
    n = doc.numel()
    for offset in range(1, row.numel() - n + 1):
        if torch.equal(row[offset : offset + n], doc):
            return offset
    return None


@torch.no_grad()
def isolation(
    task: Task,
    model: torch.nn.Module,
    examples: Sequence[Any],
    collate: Callable[[list[Any]], dict[str, torch.Tensor]],
    device: torch.device,
) -> dict[str, Any] | None:
    """Whether packed documents see each other; None when the collator does not pack. `collate`
    turns examples into a batch on the device, as the training's loop does."""
    if task.kind != CAUSAL_LM or len(examples) < 2:
        return None
    packed = collate(list(examples))
    if packed["input_ids"].shape[0] >= len(examples):
        return None  # one example a row (or more rows): nothing packed
    was_training = model.training
    model.eval()
    cuda = [device] if device.type == "cuda" else []
    compared, worst, worst_id, prompts = 0, 0.0, "", False
    try:
        with torch.random.fork_rng(devices=cuda):
            in_pack = _token_losses(task, model, packed)
            for ex in examples:
                alone = collate([ex])
                if alone["input_ids"].shape[0] != 1:
                    continue
                doc = alone["input_ids"][0]
                scored = F.pad(alone["labels"][0, 1:], (0, 1), value=task.ignore_index) != task.ignore_index
                prompts = prompts or bool((alone["labels"][0, 1:] == task.ignore_index).any())
                for r in range(packed["input_ids"].shape[0]):
                    offset = _locate(packed["input_ids"][r], doc)
                    if offset is None:
                        continue
                    own = _token_losses(task, model, alone)[0][scored]
                    there = in_pack[r, offset : offset + doc.numel()][scored]
                    if own.numel() == 0:
                        break
                    gap = float((own - there).abs().max())
                    compared += 1
                    if gap > worst:
                        worst, worst_id = gap, str(ex.get("id", "")) if isinstance(ex, dict) else ""
                    break
    finally:
        model.train(was_training)
    if not compared:
        return {"packed": True, "compared": 0}
    return {
        "packed": True,
        "compared": compared,
        "rows": int(packed["input_ids"].shape[0]),
        "examples": len(examples),
        "worst_token_loss_gap": round(worst, 6),
        "worst_example": worst_id,
        "isolated": worst <= TOLERANCE,
        "prompted_data": prompts,
    }
