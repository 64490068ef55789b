"""Forward, loss and predictions for the two task kinds, honouring a task's own overrides."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...tasks.contract import CAUSAL_LM, Batch, Task

MODEL_KEYS = ("input_ids", "attention_mask")


def forward(task: Task, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    if task.forward is not None:
        return task.forward(model, batch)
    if task.kind == CAUSAL_LM:
        return model(batch["input_ids"], batch.get("attention_mask"))
    return model(batch["features"])


def forward_name(task: Task) -> str:
    """Where the task's forward lives, for a message the user can act on."""
    fn = task.forward
    if fn is None:
        return "the default forward (model(input_ids, attention_mask) or model(features))"
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"the task's forward {getattr(fn, '__qualname__', repr(fn))}{where}"


def check_logits(task: Task, logits: torch.Tensor, labels: torch.Tensor) -> None:
    """Logits must line up with the labels before any loss is computed: a forward that returns,
    say, the last position only would otherwise fail later in torch's words, far from the cause."""
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"{forward_name(task)} returned {type(logits).__name__}, not a logits tensor")
    if task.kind == CAUSAL_LM:
        ok = logits.dim() == 3 and logits.shape[:2] == labels.shape
    else:
        ok = logits.dim() in (1, 2) and logits.shape[0] == labels.shape[0]  # [B] for a one-logit binary
    if not ok:  # every microbatch passes here: the message is built only when it is needed
        want = (
            f"[{', '.join(map(str, labels.shape))}, vocab]"
            if task.kind == CAUSAL_LM
            else f"[{labels.shape[0]}, classes]"
        )
        raise ValueError(
            f"{forward_name(task)} returned logits of shape {list(logits.shape)} for labels of shape "
            f"{list(labels.shape)}: expected {want} (one row of logits per label position)"
        )


def targets(task: Task, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels) aligned one to one; causal LM shifts so position t predicts t + 1."""
    labels = batch["labels"]
    check_logits(task, logits, labels)
    if task.kind == CAUSAL_LM:
        return logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    return logits, labels


def supervised_targets(task: Task, batch: Batch) -> torch.Tensor:
    """The supervised-target count as a tensor on the batch's device (reading it syncs)."""
    labels = batch["labels"]
    if task.kind == CAUSAL_LM:
        labels = labels[:, 1:]
    return (labels != task.ignore_index).sum()


def supervised_count(task: Task, batch: Batch) -> int:
    """Targets that count in the loss; the update divides by their sum over all microbatches (R9).

    Counted with torch, on the host batches before their copy (no device sync): the ops a
    training loop already runs every update. numpy's count is faster run hot in a loop, but
    called once per microbatch between a model's backward and the next forward its code is
    cold, and timed there it cost twice torch's (~45 against ~25 µs a microbatch on the demo;
    docs/engine.md, "What the update asks of torch")."""
    return int(supervised_targets(task, batch))


def loss_sum(task: Task, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Sum (not mean) of per-target losses: normalisation happens once per update.

    A causal LM shifts its labels, not its logits: the labels move one position left with
    `ignore_index` in the freed last place, and every position's logits are scored against them,
    the last one contributing nothing. `logits[:, :-1]` would copy the whole [batch, length,
    vocab] tensor in the forward and again for its gradient in the backward — for a 128k
    vocabulary the largest tensors of the update — where the labels are a few integers a row.
    transformers' causal-LM loss does the same."""
    if task.loss is not None:
        return task.loss(logits, batch)[0]
    labels = batch["labels"]
    check_logits(task, logits, labels)
    if task.kind == CAUSAL_LM:
        labels = F.pad(labels[:, 1:], (0, 1), value=task.ignore_index)
        logits = logits.reshape(-1, logits.shape[-1])  # a view: a model's logits are contiguous
        labels = labels.reshape(-1)
    return F.cross_entropy(logits.float(), labels, ignore_index=task.ignore_index, reduction="sum")


def predict(task: Task, logits: torch.Tensor) -> torch.Tensor:
    """The predicted id per target: the argmax, or for a one-logit binary classifier (a BCE
    head) the logit thresholded at 0 (probability 0.5). An argmax over one logit is always 0,
    so it would report a model that learnt its labels as recovering only the zeros."""
    if task.kind != CAUSAL_LM and logits.shape[-1] == 1:
        return (logits[..., 0] > 0).long()
    return logits.argmax(-1)


def recovered(task: Task, logits: torch.Tensor, batch: Batch) -> tuple[int, int]:
    """(targets whose prediction equals the label, supervised targets)."""
    flat_logits, flat_labels = targets(task, logits, batch)
    flat_labels = flat_labels.reshape(-1)
    keep = flat_labels != task.ignore_index
    hits = (predict(task, flat_logits).reshape(-1) == flat_labels) & keep
    return int(hits.sum()), int(keep.sum())
