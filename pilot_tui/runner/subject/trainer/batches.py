"""The batches the trainer's loop really gets: `get_train_dataloader()`, one accumulation window,
each token as padding / context / scored / document boundary, and the trainer's own normaliser
(`num_items_in_batch` as its loop computes it) beside the count the shifted loss scores. An
encoder-decoder's rows are shown through their causal view (`adapter.seq2seq_view`), and its
loss scores every target (the decoder's inputs are the targets shifted right, not the labels)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ....analysis.checks import Check
from ....core.verdict import PASS, WARN
from ....tasks.contract import TOKEN_CLASSIFICATION
from ...checks.objective_checks import rng_untouched
from .adapter import stack

IGNORE = -100
# A padding-free batch is one long row: the pane shows its head.
MAX_TOKENS = 384
LEGEND = (
    "[...] scored (label ≠ -100 and position ≥ 1: the shift never scores position 0) · plain: context · "
    "· padding · │ a document boundary (position_ids restart)"
)


@dataclass
class LoaderView:
    examples: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    legend: str = LEGEND


def role(t: int, label: int, real: bool) -> str:
    if not real:
        return "padding"
    return "supervised" if t >= 1 and label != IGNORE else "ignored"


def _row_tokens(adapter: Any, batch: dict[str, torch.Tensor], r: int) -> list[dict[str, Any]]:
    ids = batch["input_ids"][r].tolist()
    labels = batch["labels"][r].tolist() if "labels" in batch else ids
    mask = batch["attention_mask"][r].tolist() if "attention_mask" in batch else [1] * len(ids)
    pos = batch["position_ids"][r].tolist() if "position_ids" in batch else None
    tokens = []
    for t in range(min(len(ids), MAX_TOKENS)):
        tok = {
            "piece": adapter.decode(ids[t]),
            "id": int(ids[t]),
            "mask": int(mask[t]),
            "label": int(labels[t]),
            "role": role(t, int(labels[t]), bool(mask[t])),
        }
        if pos is not None and t > 0 and pos[t] == 0 and mask[t]:
            tok["boundary"] = True
        tokens.append(tok)
    return tokens


def _render(tokens: list[dict[str, Any]]) -> str:
    out, current = [], ""
    for tok in tokens:
        if tok.get("boundary"):
            if current == "supervised":
                out.append("]")
                current = ""
            out.append("│")
        if tok["role"] != current:
            if current == "supervised":
                out.append("]")
            if tok["role"] == "supervised":
                out.append("[")
            current = tok["role"]
        out.append("·" if tok["role"] == "padding" else str(tok["piece"]))
    if current == "supervised":
        out.append("]")
    return "".join(out)


def _as_views(adapter: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch as its rows' views (`adapter.view`: an encoder-decoder's causal view, a label-less
    sequence scored by its completion mask), each row alone, right-padded into one batch."""
    keys = [k for k in ("input_ids", "attention_mask", "labels", "completion_mask") if k in batch]
    rows = [{k: batch[k][r : r + 1] for k in keys} for r in range(batch["input_ids"].shape[0])]
    return stack([adapter.view(row) for row in rows], adapter.pad_id)


def first_window(trainer: Any) -> list[dict[str, Any]]:
    """The first accumulation window of the trainer's own train dataloader, its RNG untouched."""
    accumulation = max(1, int(trainer.args.gradient_accumulation_steps))
    window: list[dict[str, Any]] = []
    with rng_untouched(
        [trainer.args.device]
    ):  # a loader's iterator draws from the global RNG: train() must not see it
        for batch in trainer.get_train_dataloader():
            window.append(batch)
            if len(window) == accumulation:
                break
    return window


def loader_view(trainer: Any, adapter: Any, show: int) -> LoaderView:
    """The first accumulation window of the trainer's own train dataloader."""
    view = LoaderView()
    window = first_window(trainer)
    if not window:
        view.checks.append(Check("normaliser", WARN, "the train dataloader yields no batch"))
        return view
    num_items = trainer._get_num_items_in_batch(window, trainer.args.device)
    cpu = [{k: v.cpu() for k, v in b.items() if isinstance(v, torch.Tensor)} for b in window]
    if adapter.kind.classifier:
        return classifier_view(view, adapter, cpu, num_items, show)
    shifted = sum(int((b["labels"][..., 1:] != IGNORE).sum()) for b in cpu if "labels" in b)
    unshifted = sum(int((b["labels"] != IGNORE).sum()) for b in cpu if "labels" in b)
    boundaries = sum(int((b["position_ids"][:, 1:] == 0).sum()) for b in cpu if "position_ids" in b)
    seq2seq = bool(getattr(adapter, "encoder_decoder", False)) and all("labels" in b for b in cpu)
    masked = all("labels" not in b and "completion_mask" in b for b in cpu)
    # Read as the checks read them: an encoder-decoder's causal views, a preference batch's
    # sequences scored by their completion mask. A view's shifted count is what its loss scores.
    views = [_as_views(adapter, b) for b in cpu] if seq2seq or masked else cpu
    if seq2seq or masked:
        shifted = sum(int((v["labels"][..., 1:] != IGNORE).sum()) for v in views)
    if adapter.kind.task_kind == TOKEN_CLASSIFICATION:
        shifted = unshifted  # a token classifier scores each position's own label: no shift
    scored, what = shifted, "the decoder's loss" if seq2seq else "the shifted loss"
    view.windows.append(
        {
            "microbatches": len(cpu),
            "shapes": [list(b["input_ids"].shape) for b in cpu],
            "num_items_in_batch": int(num_items) if num_items is not None else None,
            "scored_shifted": shifted,
            "labels_not_ignored": unshifted,
            "document_boundaries": boundaries,
            **({"encoder_decoder": True} if seq2seq else {}),
        }
    )
    if num_items is None:
        view.checks.append(
            Check(
                "normaliser",
                PASS,
                f"the trainer passes no num_items_in_batch (its loss is averaged per microbatch and divided "
                f"by the accumulation steps); the window scores {scored} tokens",
            )
        )
    elif int(num_items) != scored:
        view.checks.append(
            Check(
                "normaliser",
                WARN,
                f"the trainer divides the window's loss by num_items_in_batch = {int(num_items)} but "
                f"{what} scores {scored} tokens ({unshifted} labels ≠ -100 before any shift)",
            )
        )
    else:
        view.checks.append(
            Check(
                "normaliser",
                PASS,
                f"num_items_in_batch = {int(num_items)}: the tokens {what} scores in the first window "
                f"({len(cpu)} microbatch{'es' if len(cpu) > 1 else ''})",
            )
        )
    shown = 0
    for m, b in enumerate(views):
        for r in range(b["input_ids"].shape[0]):
            if shown >= show:
                break
            tokens = _row_tokens(adapter, b, r)
            scored = sum(1 for tk in tokens if tk["role"] == "supervised")
            view.examples.append(
                {
                    "index": shown,
                    "id": f"window 0 · microbatch {m} · row {r}",
                    "split": "train",
                    "padded_length": int(b["input_ids"].shape[1]),
                    "real_tokens": sum(tk["mask"] for tk in tokens),
                    "supervised": scored,
                    "documents": 1 + sum(1 for tk in tokens if tk.get("boundary")),
                    "flags": [] if scored else ["no scored token"],
                    "text": _render(tokens),
                    "tokens": tokens,
                }
            )
            shown += 1
    return view


def classifier_view(
    view: LoaderView, adapter: Any, cpu: list[dict[str, torch.Tensor]], num_items: Any, show: int
) -> LoaderView:
    """A sequence classifier's window: each row's input as the model reads it and its class."""
    names = list(adapter.kind.class_names)
    rows = sum(int(b["input_ids"].shape[0]) for b in cpu)
    view.legend = "each row: its real tokens, decoded, then -> its label (id and name)"
    view.windows.append(
        {
            "microbatches": len(cpu),
            "shapes": [list(b["input_ids"].shape) for b in cpu],
            "num_items_in_batch": int(num_items) if num_items is not None else None,
            "rows": rows,
        }
    )
    said = (
        f"num_items_in_batch = {int(num_items)} for the window's {rows} examples"
        if num_items is not None
        else f"the trainer passes no num_items_in_batch (the loss is averaged per microbatch); {rows} examples"
    )
    view.checks.append(Check("normaliser", PASS, said))
    shown = 0
    for m, b in enumerate(cpu):
        mask = b.get("attention_mask", torch.ones_like(b["input_ids"]))
        for r in range(b["input_ids"].shape[0]):
            if shown >= show:
                break
            ids = b["input_ids"][r][mask[r].bool()].tolist()
            label = b["labels"][r] if "labels" in b else None
            value = label.tolist() if label is not None else None
            name = names[value] if isinstance(value, int) and 0 <= value < len(names) else ""
            text = "".join(adapter.decode(i) for i in ids)
            view.examples.append(
                {
                    "index": shown,
                    "id": f"window 0 · microbatch {m} · row {r}",
                    "split": "train",
                    "padded_length": int(b["input_ids"].shape[1]),
                    "real_tokens": len(ids),
                    "label": value,
                    "name": name,
                    "flags": [] if label is not None else ["no label"],
                    "text": f"{text} -> {value}" + (f" {name}" if name else ""),
                }
            )
            shown += 1
    return view
