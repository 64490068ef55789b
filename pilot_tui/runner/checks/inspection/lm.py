"""A causal LM's examples as the loss sees them: the whole-dataset scan, its checks, and the
examples rendered token by token (R1, R2).

Conventions (those of `checks/objective.py`): labels are aligned with `input_ids`, the loss
shifts by one, so the label at position 0 never counts and the token at position t is a target
when `labels[t] != ignore_index`. Truncation is assumed to keep the head of the sequence (the
tokens past `max_length` are the ones lost).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ....analysis.checks import SHOW_IDS, Check, pct
from ....core.verdict import FAIL, PASS, WARN
from ....tasks.contract import Task
from .common import (
    LEGEND,
    ModelOutput,
    batches,
    digest_batch,
    example_id,
    ids_line,
    pick_shown,
    piece,
    real_mask,
    shown_ids,
)


@dataclass
class LMScan:
    """Per-example figures over the whole dataset, in `indices` order."""

    indices: list[int]
    raw_length: list[int]
    truncated_length: list[int]
    supervised: list[int]
    padding_supervised: list[int]
    # Labels equal to input_ids on every real token: nothing is masked at all.
    copied: list[bool]
    # None when the collate gives no `prompt_length`.
    prompt_length: list[int] | None
    prompt_supervised: list[bool] | None
    # Alignment: supervised real positions whose label is not the input id there; of those,
    # how many equal the *next* input id (labels shifted a second time) and the first one.
    misaligned: list[int]
    shifted: list[int]
    first_misaligned: list[int]
    # The first response token (position prompt_length) ignored while later ones count.
    boundary_masked: list[bool]
    # Supervised pad_id positions the attention mask calls real (see `_pad_targets`).
    pad_targets: list[int]
    # Largest and smallest supervised label (ignore_index excluded) and its position.
    label_max: list[int]
    label_max_at: list[int]
    label_min: list[int]
    # The first two real tokens of each row (-1 when the row has fewer): a doubled BOS.
    first_token: list[int] = dataclasses.field(default_factory=list)
    second_token: list[int] = dataclasses.field(default_factory=list)

    @property
    def response_cut(self) -> list[bool]:
        return [r > t for r, t in zip(self.raw_length, self.truncated_length, strict=True)]


def _pad_targets(ids: torch.Tensor, counted: torch.Tensor, real: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Per row: supervised positions inside the leading or trailing run of `pad_id` that the
    attention mask calls real (padding the mask does not mark). The first token of a trailing
    run is spared: many tokenizers pad with their EOS id, and one EOS is a legitimate target.
    `counted` and `real` are over positions 1.. (the shift)."""
    is_pad = ids == pad_id
    # A run reaches the end when every position from it to the end is a pad: a reversed cumprod.
    trailing = is_pad.flip(1).long().cumprod(1).flip(1).bool()
    leading = is_pad.long().cumprod(1).bool()
    first_trailing = trailing & ~torch.cat([torch.zeros_like(trailing[:, :1]), trailing[:, :-1]], 1)
    pads = ((trailing & ~first_trailing) | leading)[:, 1:]
    return (pads & counted & real[:, 1:]).sum(1)


def scan_lm(task: Task, max_length: int, digests: list[tuple[str, str]] | None = None) -> LMScan:
    """Collate every example as training will (truncated at `max_length`) and measure it.

    `digests`, when given, receives `seen_digests` from the same collate pass (the collate is
    the user's code and most of a scan's cost: the split check reuses it)."""
    indices = list(range(len(task.examples)))
    out: dict[str, list[Any]] = collections.defaultdict(list)
    has_prompt, has_raw = True, True
    ignore = task.ignore_index
    for chunk, batch in batches(task, indices, max_length):
        if digests is not None:
            digests += digest_batch(batch, len(chunk))
        ids, labels, real = batch["input_ids"], batch["labels"], real_mask(batch)
        counted = labels[:, 1:] != ignore  # the shift: position 0 is never a target
        out["supervised"] += counted.sum(1).tolist()
        out["truncated_length"] += real.sum(1).tolist()
        out["padding_supervised"] += (counted & ~real[:, 1:]).sum(1).tolist()
        same = (labels == ids) | ~real
        out["copied"] += (same.all(1) & (real.sum(1) > 1)).tolist()
        # The runner shifts once, so a supervised label must be the input id at its own position.
        checked = counted & real[:, 1:]
        wrong = checked & (labels[:, 1:] != ids[:, 1:])
        nxt = torch.cat([ids[:, 2:], torch.full_like(ids[:, :1], -1)], 1)  # the next input id
        out["misaligned"] += wrong.sum(1).tolist()
        out["shifted"] += (wrong & (labels[:, 1:] == nxt)).sum(1).tolist()
        width = wrong.shape[1]
        if width:
            first = torch.where(wrong.any(1), wrong.float().argmax(1) + 1, -1)
            top = labels[:, 1:].masked_fill(~counted, -1).max(1)  # -1: no supervised label
            low = labels[:, 1:].masked_fill(~counted, 0).min(1).values
            out["first_misaligned"] += first.tolist()
            out["label_max"] += top.values.tolist()
            out["label_max_at"] += (top.indices + 1).tolist()
            out["label_min"] += low.tolist()
        else:  # one-token rows: nothing is ever a target
            out["first_misaligned"] += [-1] * len(ids)
            out["label_max"] += [-1] * len(ids)
            out["label_max_at"] += [0] * len(ids)
            out["label_min"] += [0] * len(ids)
        out["pad_targets"] += _pad_targets(ids, counted, real, task.pad_id).tolist()
        start = real.long().argmax(1)  # left padding: the first real position
        rows = torch.arange(ids.shape[0])
        two = real.sum(1) >= 2
        out["first_token"] += torch.where(real.any(1), ids[rows, start], -1).tolist()
        second = ids[rows, (start + 1).clamp(max=max(ids.shape[1] - 1, 0))]
        out["second_token"] += torch.where(two, second, -1).tolist()
        if "prompt_length" in batch and has_prompt:
            plen = batch["prompt_length"].reshape(-1)
            positions = torch.arange(1, ids.shape[1])
            in_prompt = positions[None, :] < plen[:, None]
            out["prompt_length"] += plen.tolist()
            out["prompt_supervised"] += (counted & in_prompt).any(1).tolist()
            # Off by one at the boundary: the first response token is ignored although a later
            # response token counts (a prompt mask one token too long).
            at = (plen - 1).clamp(0, max(width - 1, 0))
            inside = (plen >= 1) & (plen < real.sum(1))
            first_ignored = ~counted.gather(1, at[:, None].long()).squeeze(1) if width else inside
            later = (counted & (positions[None, :] > plen[:, None])).any(1)
            out["boundary_masked"] += (inside & first_ignored & later).tolist()
        else:
            has_prompt = False
            out["boundary_masked"] += [False] * len(ids)
        if "raw_length" in batch and has_raw:
            out["raw_length"] += batch["raw_length"].reshape(-1).tolist()
        else:
            has_raw = False
    if not has_raw:
        # No untruncated length from the collate: collate once more without truncation.
        out["raw_length"] = []
        for _chunk, batch in batches(task, indices, 0):
            out["raw_length"] += real_mask(batch).sum(1).tolist()
    return LMScan(
        indices=indices,
        raw_length=[int(x) for x in out["raw_length"]],
        truncated_length=[int(x) for x in out["truncated_length"]],
        supervised=[int(x) for x in out["supervised"]],
        padding_supervised=[int(x) for x in out["padding_supervised"]],
        copied=[bool(x) for x in out["copied"]],
        prompt_length=[int(x) for x in out["prompt_length"]] if has_prompt else None,
        prompt_supervised=[bool(x) for x in out["prompt_supervised"]] if has_prompt else None,
        misaligned=[int(x) for x in out["misaligned"]],
        shifted=[int(x) for x in out["shifted"]],
        first_misaligned=[int(x) for x in out["first_misaligned"]],
        boundary_masked=[bool(x) for x in out["boundary_masked"]] if has_prompt else [False] * len(indices),
        pad_targets=[int(x) for x in out["pad_targets"]],
        label_max=[int(x) for x in out["label_max"]],
        label_max_at=[int(x) for x in out["label_max_at"]],
        label_min=[int(x) for x in out["label_min"]],
        first_token=[int(x) for x in out["first_token"]],
        second_token=[int(x) for x in out["second_token"]],
    )


def _supervised_untruncated(task: Task, indices: Sequence[int]) -> list[int]:
    counts: list[int] = []
    for _chunk, batch in batches(task, indices, 0):
        counts += (batch["labels"][:, 1:] != task.ignore_index).sum(1).tolist()
    return counts


def lm_checks(
    task: Task, scan: LMScan, max_length: int, supervise_prompt: bool, output: ModelOutput | None = None
) -> list[Check]:
    """Zero supervision (fail), prompt supervision against the declaration (fail), labels not
    aligned with the inputs (fail), the prompt/response boundary (fail), supervised padding
    (fail), labels beyond the model's output (fail), responses cut by `max_length` (warn)."""
    n = len(scan.indices)
    checks = []

    zero = [i for i, s in zip(scan.indices, scan.supervised, strict=True) if s == 0]
    if zero:
        before = _supervised_untruncated(task, zero)
        cut = sum(1 for s in before if s > 0)
        cause = []
        if cut:
            cause.append(f"{cut} lost every supervised token to max_length {max_length}")
        if len(zero) - cut:
            cause.append(f"{len(zero) - cut} have every label masked by the collate")
        checks.append(
            Check(
                "supervised_tokens",
                FAIL,
                f"{len(zero)} of {n} examples ({pct(len(zero), n)}%) have no supervised token "
                f"({'; '.join(cause)}): their loss reads 0 while it means nothing — e.g. {ids_line(task, zero)}",
                len(zero),
                shown_ids(task, zero),
            )
        )
    else:
        checks.append(
            Check("supervised_tokens", PASS, f"every one of {n} examples has a supervised token", 0)
        )

    checks.append(_prompt_check(task, scan, supervise_prompt))

    checks.append(_alignment_check(task, scan))
    if scan.prompt_length is not None:
        checks.append(_boundary_check(task, scan))

    masked = [i for i, p in zip(scan.indices, scan.padding_supervised, strict=True) if p > 0]
    unmarked = [i for i, p in zip(scan.indices, scan.pad_targets, strict=True) if p > 0]
    padded = sorted(set(masked) | set(unmarked))
    if padded:
        parts = []
        if masked:
            parts.append(f"{len(masked)} on positions the attention mask marks as padding")
        if unmarked:
            positions = sum(scan.pad_targets[i] for i in unmarked)
            parts.append(
                f"{len(unmarked)} on {positions} pad_id ({task.pad_id}) positions at the ends of rows that "
                "the attention mask calls real"
            )
        checks.append(
            Check(
                "padding_supervised",
                FAIL,
                f"{len(padded)} of {n} examples have padding counted in the loss ({'; '.join(parts)}; "
                f"labels not set to {task.ignore_index} on padding) — e.g. {ids_line(task, padded)}",
                len(padded),
                shown_ids(task, padded),
            )
        )
    else:
        checks.append(Check("padding_supervised", PASS, "no padding position is counted in the loss"))

    checks.append(_lm_range_check(task, scan, output))
    checks.append(_bos_check(task, scan))

    cut = [i for i, c in zip(scan.indices, scan.response_cut, strict=True) if c]
    if cut:
        longest = max(scan.raw_length)
        checks.append(
            Check(
                "responses_cut",
                WARN,
                f"{len(cut)} of {n} responses ({pct(len(cut), n)}%) are cut by max_length {max_length} "
                f"(the longest example has {longest} tokens) — e.g. {ids_line(task, cut)}",
                len(cut),
                shown_ids(task, cut),
            )
        )
    else:
        said = (
            f"no response is cut by max_length {max_length}"
            if max_length
            else "no max_length cuts here (rows arrive as the data preparation left them, cut or not)"
        )
        checks.append(Check("responses_cut", PASS, said))
    return checks


# The share of rows that must open with one token for it to be taken as the BOS.
BOS_SHARE = 0.9


def _bos_check(task: Task, scan: LMScan) -> Check:
    """Rows that open with the BOS twice (a chat template that writes it and a tokenizer that
    adds it again): the model trains on a start it will not be served with. The BOS is the token
    that opens nearly every row; a row that merely starts with a repeated letter is content."""
    firsts = [t for t in scan.first_token if t >= 0]
    if not firsts:
        return Check("bos_tokens", PASS, "no example to read a first token from")
    bos, opening = collections.Counter(firsts).most_common(1)[0]
    doubled = [
        i
        for i, a, b in zip(scan.indices, scan.first_token, scan.second_token, strict=True)
        if a == bos and b == bos
    ]
    if opening < BOS_SHARE * len(firsts) or not doubled:
        return Check("bos_tokens", PASS, "no example starts with its opening token twice")
    n = len(scan.indices)
    return Check(
        "bos_tokens",
        WARN,
        f"{len(doubled)} of {n} examples ({pct(len(doubled), n)}%) start with {piece(task, bos)!r} (id {bos}) "
        "twice — a template that writes the BOS and a tokenizer that adds another; the model learns a "
        f"start it will not be served with, e.g. {ids_line(task, doubled)}",
        len(doubled),
        shown_ids(task, doubled[:SHOW_IDS]),
    )


def _at(task: Task, i: int, position: int) -> str:
    return f"{example_id(task, i)} position {position}"


def _alignment_check(task: Task, scan: LMScan) -> Check:
    """A supervised label must be the input id at the same position: the runner shifts once."""
    n = len(scan.indices)
    if task.loss is not None:
        return Check(
            "label_alignment",
            PASS,
            "the task has its own loss: labels are read by it, alignment with input_ids is not checked",
        )
    wrong = [i for i, m in zip(scan.indices, scan.misaligned, strict=True) if m > 0]
    if not wrong:
        return Check(
            "label_alignment",
            PASS,
            "every supervised label is the input id at its own position (shifted once)",
        )
    positions = sum(scan.misaligned[i] for i in wrong)
    shifted = sum(scan.shifted[i] for i in wrong)
    first = wrong[0]
    example = f"{_at(task, first, scan.first_misaligned[first])}"
    if shifted >= 0.8 * positions:
        what = (
            f"labels shifted a second time: in {len(wrong)} of {n} examples {shifted} of {positions} "
            "misplaced supervised labels are the *next* input token, and the runner shifts again "
            "(position t predicts t + 1), so the model learns to predict two tokens ahead — keep "
            "labels aligned with input_ids (labels = input_ids, masked), do not shift them"
        )
    else:
        what = (
            f"{positions} supervised labels in {len(wrong)} of {n} examples are not the input id at "
            "their position: the runner shifts once, so labels must be aligned with input_ids"
        )
    return Check(
        "label_alignment",
        FAIL,
        f"{what} — first at {example}; e.g. {ids_line(task, wrong)}",
        len(wrong),
        shown_ids(task, wrong),
    )


def _boundary_check(task: Task, scan: LMScan) -> Check:
    assert scan.prompt_length is not None
    n = len(scan.indices)
    wrong = [i for i, b in zip(scan.indices, scan.boundary_masked, strict=True) if b]
    if not wrong:
        return Check("response_boundary", PASS, "the first response token is a target in every example")
    first = wrong[0]
    return Check(
        "response_boundary",
        FAIL,
        f"{len(wrong)} of {n} examples ignore their first response token although later ones count "
        f"(position prompt_length = {scan.prompt_length[first]} in {example_id(task, first)}): the prompt "
        f"mask is one token too long — e.g. {ids_line(task, wrong)}",
        len(wrong),
        shown_ids(task, wrong),
    )


def _lm_range_check(task: Task, scan: LMScan, output: ModelOutput | None) -> Check:
    """Labels must index the model's output: an id ≥ its size raises `IndexError` on CPU and a
    device-side assert on a GPU, mid-campaign."""
    n = len(scan.indices)
    low = [i for i, v in zip(scan.indices, scan.label_min, strict=True) if v < 0 and scan.supervised[i]]
    if output is not None and output.size is None:
        return Check("label_range", FAIL, f"{output.error}: training will fail the same way")
    if output is None:
        if low:
            return Check(
                "label_range",
                FAIL,
                f"{len(low)} of {n} examples have negative labels other than ignore_index "
                f"{task.ignore_index} — e.g. {ids_line(task, low)}",
                len(low),
                shown_ids(task, low),
            )
        return Check(
            "label_range", PASS, "no model forward was run: labels not checked against its output size"
        )
    size = output.size
    high = [i for i, v in zip(scan.indices, scan.label_max, strict=True) if v >= size]
    bad = sorted(set(high) | set(low))
    if not bad:
        return Check(
            "label_range", PASS, f"every supervised label is in [0, {size}) (the model's output size)"
        )
    values = sorted({scan.label_max[i] for i in high} | {scan.label_min[i] for i in low})
    first = high[0] if high else low[0]
    return Check(
        "label_range",
        FAIL,
        f"{len(bad)} of {n} examples have supervised labels outside [0, {size}) — the model outputs "
        f"{size} logits (one forward of the shown batch) — values {values[:SHOW_IDS]}, first at "
        f"{_at(task, first, scan.label_max_at[first])}: the loss raises IndexError (a device-side assert "
        f"on a GPU) — e.g. {ids_line(task, bad)}",
        len(bad),
        shown_ids(task, bad),
    )


def _prompt_check(task: Task, scan: LMScan, supervise_prompt: bool) -> Check:
    n = len(scan.indices)
    declared = f"the campaign declares supervise_prompt = {str(supervise_prompt).lower()}"
    if scan.prompt_supervised is None:
        # Without prompt lengths, labels that copy input_ids everywhere are the one sure sign.
        copied = [i for i, c in zip(scan.indices, scan.copied, strict=True) if c]
        if copied and not supervise_prompt:
            return Check(
                "prompt_supervision",
                FAIL,
                f"{len(copied)} of {n} examples have labels identical to input_ids (nothing masked, "
                f"prompt included) but {declared} — e.g. {ids_line(task, copied)}",
                len(copied),
                shown_ids(task, copied),
            )
        return Check(
            "prompt_supervision",
            PASS,
            "the collate gives no prompt_length: prompt supervision checked only for labels that copy input_ids",
        )
    if supervise_prompt:
        wrong = [i for i, p in zip(scan.indices, scan.prompt_supervised, strict=True) if not p]
        what = "no supervised prompt token"
    else:
        wrong = [i for i, p in zip(scan.indices, scan.prompt_supervised, strict=True) if p]
        copies = sum(1 for i in wrong if scan.copied[i])
        what = "supervised prompt tokens (the instruction is not masked" + (
            f"; labels identical to input_ids in {copies})" if copies else ")"
        )
    if not wrong:
        return Check("prompt_supervision", PASS, f"prompt supervision matches: {declared}")
    return Check(
        "prompt_supervision",
        FAIL,
        f"{len(wrong)} of {n} examples ({pct(len(wrong), n)}%) have {what} but {declared} — "
        f"e.g. {ids_line(task, wrong)}",
        len(wrong),
        shown_ids(task, wrong),
    )


# ------------------------------------------------------------------------------------------
# Causal LM: the shown examples, token by token


def role_of(position: int, label: int, real: bool, ignore: int) -> str:
    """What the loss does with one position (see the module docstring for the shift)."""
    if position >= 1 and label != ignore:
        return "supervised"  # counted even on a padding position: that is what the loss sees
    return "ignored" if real else "padding"


def render(tokens: Sequence[Mapping[str, Any]]) -> str:
    """One readable line: `[...]` supervised, plain ignored, `·` padding, `✂(...)` cut."""
    out: list[str] = []
    current = ""
    for tok in tokens:
        role = tok["role"]
        if role != current:
            if current in ("supervised", "cut"):
                out.append("]" if current == "supervised" else ")")
            if role == "supervised":
                out.append("[")
            elif role == "cut":
                out.append("✂(")
            current = role
        out.append("·" if role == "padding" else str(tok["piece"]))
    if current in ("supervised", "cut"):
        out.append("]" if current == "supervised" else ")")
    return "".join(out)


def show_lm(
    task: Task,
    indices: Sequence[int],
    max_length: int,
    microbatch: int,
    scan: LMScan,
    split_of: Mapping[int, str],
) -> list[dict[str, Any]]:
    """The shown examples exactly as collated for training, in microbatches, plus what was cut."""
    shown = []
    position = {i: k for k, i in enumerate(scan.indices)}
    ignore = task.ignore_index
    for start in range(0, len(indices), max(1, microbatch)):
        chunk = list(indices[start : start + max(1, microbatch)])
        batch = task.collate([task.examples[i] for i in chunk], max_length)
        full = task.collate([task.examples[i] for i in chunk], 0)
        real, full_real = real_mask(batch), real_mask(full)
        width = batch["input_ids"].shape[1]
        for r, index in enumerate(chunk):
            ids = batch["input_ids"][r].tolist()
            labels = batch["labels"][r].tolist()
            mask = real[r].tolist()
            tokens = [
                {
                    "piece": piece(task, ids[t]),
                    "id": int(ids[t]),
                    "mask": int(mask[t]),
                    "label": int(labels[t]),
                    "role": role_of(t, labels[t], bool(mask[t]), ignore),
                }
                for t in range(width)
            ]
            kept = int(real[r].sum())
            full_len = int(full_real[r].sum())
            full_ids = full["input_ids"][r].tolist()
            full_labels = full["labels"][r].tolist()
            # Show the lost tail only when truncation really kept the head of the sequence.
            if full_len > kept and full_ids[:kept] == ids[:kept]:
                tokens += [
                    {
                        "piece": piece(task, full_ids[t]),
                        "id": int(full_ids[t]),
                        "mask": 0,
                        "label": int(full_labels[t]),
                        "role": "cut",
                    }
                    for t in range(kept, full_len)
                ]
            k = position[index]
            summary: dict[str, Any] = {
                "index": index,
                "id": example_id(task, index),
                "split": split_of.get(index, ""),
                "raw_length": scan.raw_length[k],
                "truncated_length": scan.truncated_length[k],
                "padded_length": width,
                "supervised": scan.supervised[k],
                "response_cut": scan.response_cut[k],
            }
            if scan.prompt_length is not None and scan.prompt_supervised is not None:
                summary["prompt_length"] = scan.prompt_length[k]
                summary["prompt_supervised"] = scan.prompt_supervised[k]
            summary["flags"] = _lm_flags(scan, k)
            summary["text"] = render(tokens)
            summary["tokens"] = tokens
            shown.append(summary)
    return shown


def _lm_flags(scan: LMScan, k: int) -> list[str]:
    flags = []
    if scan.supervised[k] == 0:
        flags.append("no supervised token")
    if scan.prompt_supervised is not None and scan.prompt_supervised[k]:
        flags.append("prompt supervised")
    if scan.response_cut[k]:
        flags.append("response cut")
    if scan.padding_supervised[k] or scan.pad_targets[k]:
        flags.append("padding supervised")
    if scan.misaligned[k]:
        flags.append(f"label not aligned with input (position {scan.first_misaligned[k]})")
    if scan.boundary_masked[k]:
        flags.append("first response token masked")
    return flags


def inspect_lm(
    task: Task,
    *,
    max_length: int,
    supervise_prompt: bool,
    show: int,
    microbatch: int,
    train: list[int],
    split_of: dict[int, str],
    output: ModelOutput | None,
    digests: list[tuple[str, str]] | None,
) -> tuple[list[Check], dict[str, Any]]:
    """A causal LM's checks, and the row's figures with `show` examples token by token."""
    details: dict[str, Any] = {}
    scan = scan_lm(task, max_length, digests)
    checks = lm_checks(task, scan, max_length, supervise_prompt, output)
    size = output.size if output is not None else None
    offenders = [
        next((i for i in scan.indices if scan.misaligned[i]), None),
        next((i for i in scan.indices if scan.boundary_masked[i]), None),
        next((i for i in scan.indices if scan.pad_targets[i]), None),
        next((i for i in scan.indices if size is not None and scan.label_max[i] >= size), None),
        next((i for i, s in zip(scan.indices, scan.supervised, strict=True) if s == 0), None),
        next(
            (
                i
                for i, p in zip(scan.indices, scan.prompt_supervised or [], strict=False)
                if p != supervise_prompt
            ),
            None,
        ),
        next((i for i, p in zip(scan.indices, scan.padding_supervised, strict=True) if p), None),
        next((i for i, c in zip(scan.indices, scan.response_cut, strict=True) if c), None),
    ]
    shown = pick_shown(train, [i for i in offenders if i is not None], show)
    total = len(scan.indices)
    details |= {
        "max_length": max_length,
        "supervise_prompt": supervise_prompt,
        "prompt_known": scan.prompt_length is not None,
        "supervised_tokens": sum(scan.supervised),
        "zero_supervised": sum(1 for s in scan.supervised if s == 0),
        "prompt_supervised": sum(scan.prompt_supervised) if scan.prompt_supervised is not None else 0,
        "labels_copy_inputs": sum(scan.copied),
        "misaligned_labels": sum(scan.misaligned),
        "shifted_labels": sum(scan.shifted),
        "boundary_masked": sum(scan.boundary_masked),
        "pad_targets": sum(scan.pad_targets),
        "output_size": size if size is not None else -1,
        "label_max": max(scan.label_max),
        "responses_cut": sum(scan.response_cut),
        "responses_cut_pct": pct(sum(scan.response_cut), total),
        "raw_length_max": max(scan.raw_length),
        "raw_length_mean": round(sum(scan.raw_length) / total, 2),
        "legend": LEGEND,
        "examples": show_lm(task, shown, max_length, microbatch, scan, split_of),
    }
    return checks, details
