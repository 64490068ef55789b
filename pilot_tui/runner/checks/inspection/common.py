"""What every kind of task shares in the inspection: the task's own collate over the whole
dataset in large batches, what the model sees hashed per example, and the model's output size
from one forward."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ....analysis.checks import SHOW_IDS, Check, listing, paused_gc
from ....core.reasons import exception_line
from ....core.verdict import WARN
from ....tasks.contract import Batch, Task
from .. import objective

# Examples collated per batch when scanning the whole dataset.
CHUNK = 256
ROLES = ("supervised", "ignored", "padding", "cut")
LEGEND = (
    "[...] supervised (counted in the loss) · plain: ignored (label = ignore index) · "
    "· one padding position · ✂(...) past max_length, never seen by the model"
)


def example_id(task: Task, index: int) -> str:
    return str(task.examples[index].get("id", index))


def batches(
    task: Task, indices: Sequence[int], max_length: int, size: int = CHUNK
) -> Iterator[tuple[list[int], Batch]]:
    """The task's own collate over `indices`, `size` examples at a time (CPU, no grad)."""
    for start in range(0, len(indices), size):
        chunk = list(indices[start : start + size])
        yield chunk, task.collate([task.examples[i] for i in chunk], max_length)


def shown_ids(task: Task, indices: Sequence[int]) -> list[str]:
    return [example_id(task, i) for i in indices[:SHOW_IDS]]


def ids_line(task: Task, indices: Sequence[int]) -> str:
    """A few ids for a reason line; the check's `ids` keep up to SHOW_IDS."""
    return listing([example_id(task, i) for i in indices[:3]], len(indices))


# ------------------------------------------------------------------------------------------
# What the model sees, hashed per example (the split check's `same_input`)

# ctx.memo key: (max_length, examples, seen_digests) left by inspect for split.
SEEN_MEMO = "seen_digests"
# Batch keys that describe the example for the checks, not inputs of the model.
NOT_INPUTS = ("labels", "prompt_length", "raw_length")


@paused_gc()
def seen_digests(task: Task, max_length: int) -> list[tuple[str, str]]:
    """Per example: (digest of the collated input without its labels, digest of its labels).

    Sequence tensors keep only the positions the attention mask marks as real, so the same
    text padded differently in two batches hashes the same.
    """
    out: list[tuple[str, str]] = []
    indices = list(range(len(task.examples)))
    for chunk, batch in batches(task, indices, max_length):
        out += digest_batch(batch, len(chunk))
    return out


def digest_batch(batch: Batch, n: int) -> list[tuple[str, str]]:
    """`seen_digests` of one collated batch of `n` examples."""
    out: list[tuple[str, str]] = []
    mask = batch["attention_mask"].bool().numpy() if "attention_mask" in batch else None
    rows = []
    for key in sorted(k for k in batch if k not in NOT_INPUTS and k != "attention_mask"):
        value = batch[key]
        if value.dim() == 0 or value.shape[0] != n:
            continue  # not one row per example
        array = value.detach().cpu().contiguous().numpy()
        masked = mask is not None and array.shape[:2] == mask.shape
        rows.append((key.encode() + str(array.dtype).encode(), array, masked))
    labels = batch["labels"].detach().cpu().contiguous().numpy()
    label_masked = mask is not None and labels.shape[:2] == mask.shape
    for r in range(n):
        h = hashlib.blake2b(digest_size=16)
        for tag, array, masked in rows:
            h.update(tag)
            h.update((array[r][mask[r]] if masked else array[r]).tobytes())
        label = labels[r][mask[r]] if label_masked else labels[r]
        out.append((h.hexdigest(), hashlib.blake2b(label.tobytes(), digest_size=16).hexdigest()))
    return out


# ------------------------------------------------------------------------------------------
# The model's output size, from one forward of the shown batch


@dataclass
class ModelOutput:
    """The size of the logits' last dimension (vocabulary or classes), or why it is unknown."""

    size: int | None
    error: str = ""
    how: str = ""


def model_output(task: Task, batch: Batch, device: torch.device, seed: int = 0) -> ModelOutput:
    """One forward of `batch`: first on the meta device (shapes only, nothing allocated, no
    weights read), else for real on `device`, seeded, with the RNG left as found."""

    try:
        with torch.device("meta"):
            model = task.build_model()
        with torch.no_grad():
            logits = objective.forward(task, model, {k: v.to("meta") for k, v in batch.items()})
        return ModelOutput(int(logits.shape[-1]), how="meta")
    except Exception:
        pass  # user code that needs real tensors (weights read from disk, .item(), …)
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = task.build_model().to(device)
        model.eval()
        with torch.no_grad():
            logits = objective.forward(task, model, {k: v.to(device) for k, v in batch.items()})
        return ModelOutput(int(logits.shape[-1]), how=str(device))
    except Exception as exc:  # user code: the check says what broke
        return ModelOutput(None, f"one forward of the shown batch failed: {exception_line(exc)}")
    finally:
        torch.set_rng_state(saved)
        del saved


def pick_shown(first: Sequence[int], offenders: Sequence[int], k: int) -> list[int]:
    """The first `k` training examples, with the first offender of each failing check swapped in
    at the end, so what a check complains about is on screen."""
    extra = [i for i in dict.fromkeys(offenders) if i not in first[:k]][:k]
    base = list(first[: k - len(extra)])
    return base + extra


def real_mask(batch: Batch) -> torch.Tensor:
    """The real (not padding) positions of a batch."""
    if "attention_mask" in batch:
        return batch["attention_mask"].bool()
    return torch.ones_like(batch["input_ids"], dtype=torch.bool)


def piece(task: Task, token: int) -> str:
    """One token as text: decoded when the task can, else its id."""
    return task.decode_token(token) if task.decode_token is not None else str(token)


def inspect_token_labels(task: Task, max_length: int) -> tuple[list[Check], dict[str, Any]]:
    """A token classifier's rows: counted, not yet inspected token by token — said, never a crash."""
    rows = labelled = 0
    for _, batch in batches(task, range(len(task.examples)), max_length):
        rows += int(batch["input_ids"].shape[0])
        labelled += int((batch["labels"] != task.ignore_index).sum())
    check = Check(
        "token_labels",
        WARN,
        f"a token classifier's labels are not inspected token by token yet: {labelled} labelled tokens "
        f"over {rows} rows, counted only",
    )
    return [check], {"labelled_tokens": labelled, "rows": rows}
