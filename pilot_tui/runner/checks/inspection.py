"""What the loss really sees: the analysis behind the `inspect` phase (R1, R2).

Pure analysis over a task and its collated batches; it returns plain dicts ready for a record row
and knows nothing of phases or events, so it can be called on any task. The whole dataset is
collated in a few large batches (`CHUNK` examples each), never example by example: the scan
must stay cheap enough to run before every campaign.

Causal LM conventions (those of `objective.py`): labels are aligned with `input_ids`, the loss
shifts by one, so the label at position 0 never counts and the token at position t is a target
when `labels[t] != ignore_index`. Truncation is assumed to keep the head of the sequence (the
tokens past `max_length` are the ones lost).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...analysis.checks import SHOW_IDS, Check, CheckResult, listing, paused_gc, pct, verdict_of
from ...core.reasons import exception_line
from ...core.verdict import FAIL, PASS, WARN
from ...tasks.contract import CAUSAL_LM, Batch, Task
from . import objective

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


def _ids(task: Task, indices: Sequence[int]) -> list[str]:
    return [example_id(task, i) for i in indices[:SHOW_IDS]]


def _listing(task: Task, indices: Sequence[int]) -> str:
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


# ------------------------------------------------------------------------------------------
# Causal LM: the whole-dataset scan


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


def _real_mask(batch: Batch) -> torch.Tensor:
    if "attention_mask" in batch:
        return batch["attention_mask"].bool()
    return torch.ones_like(batch["input_ids"], dtype=torch.bool)


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
        ids, labels, real = batch["input_ids"], batch["labels"], _real_mask(batch)
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
            out["raw_length"] += _real_mask(batch).sum(1).tolist()
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
                f"({'; '.join(cause)}): their loss reads 0 while it means nothing — e.g. {_listing(task, zero)}",
                len(zero),
                _ids(task, zero),
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
                f"labels not set to {task.ignore_index} on padding) — e.g. {_listing(task, padded)}",
                len(padded),
                _ids(task, padded),
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
                f"(the longest example has {longest} tokens) — e.g. {_listing(task, cut)}",
                len(cut),
                _ids(task, cut),
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
        f"{len(doubled)} of {n} examples ({pct(len(doubled), n)}%) start with {_piece(task, bos)!r} (id {bos}) "
        "twice — a template that writes the BOS and a tokenizer that adds another; the model learns a "
        f"start it will not be served with, e.g. {_listing(task, doubled)}",
        len(doubled),
        _ids(task, doubled[:SHOW_IDS]),
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
        f"{what} — first at {example}; e.g. {_listing(task, wrong)}",
        len(wrong),
        _ids(task, wrong),
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
        f"mask is one token too long — e.g. {_listing(task, wrong)}",
        len(wrong),
        _ids(task, wrong),
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
                f"{task.ignore_index} — e.g. {_listing(task, low)}",
                len(low),
                _ids(task, low),
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
        f"on a GPU) — e.g. {_listing(task, bad)}",
        len(bad),
        _ids(task, bad),
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
                f"prompt included) but {declared} — e.g. {_listing(task, copied)}",
                len(copied),
                _ids(task, copied),
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
        f"e.g. {_listing(task, wrong)}",
        len(wrong),
        _ids(task, wrong),
    )


# ------------------------------------------------------------------------------------------
# Causal LM: the shown examples, token by token


def _piece(task: Task, token: int) -> str:
    return task.decode_token(token) if task.decode_token is not None else str(token)


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
        real, full_real = _real_mask(batch), _real_mask(full)
        width = batch["input_ids"].shape[1]
        for r, index in enumerate(chunk):
            ids = batch["input_ids"][r].tolist()
            labels = batch["labels"][r].tolist()
            mask = real[r].tolist()
            tokens = [
                {
                    "piece": _piece(task, ids[t]),
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
                        "piece": _piece(task, full_ids[t]),
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


# ------------------------------------------------------------------------------------------
# Classification


@dataclass
class ClassScan:
    """Every example's label, and what the task says it means (when it can)."""

    indices: list[int]
    labels: list[int]
    meanings: list[str] | None


def scan_classification(
    task: Task, max_length: int = 0, digests: list[tuple[str, str]] | None = None
) -> ClassScan:
    indices = list(range(len(task.examples)))
    labels: list[int] = []
    for chunk, batch in batches(task, indices, max_length):
        if digests is not None:
            digests += digest_batch(batch, len(chunk))
        labels += [int(x) for x in batch["labels"].reshape(-1).tolist()]
    if len(labels) != len(indices):
        raise ValueError(
            f"the collate returned {len(labels)} labels for {len(indices)} examples: one class id per example expected"
        )
    meanings = None
    if task.label_meaning is not None:
        meanings = [str(task.label_meaning(task.examples[i])) for i in indices]
    return ClassScan(indices, labels, meanings)


def class_names_in_use(task: Task, declared: Sequence[str]) -> list[str]:
    return list(declared) if declared else list(task.class_names or [])


def classification_checks(
    task: Task, scan: ClassScan, declared: Sequence[str], output: ModelOutput | None = None
) -> list[Check]:
    """Label range against the names (fail) and the model's output (fail), declared names
    against the task's (fail), a name used twice (fail), names against what the labels mean —
    `label_meaning` or an example field holding the names (fail; warn when nothing ties ids to
    meanings), a single class (fail), a class never seen (warn)."""
    names = class_names_in_use(task, declared)
    n = len(scan.indices)
    checks = []
    ncls = len(names)
    if output is not None:
        checks.append(_class_output_check(task, scan, output))
    if ncls:
        bad = [i for i, y in zip(scan.indices, scan.labels, strict=True) if not 0 <= y < ncls]
        if bad:
            values = sorted({scan.labels[i] for i in bad})
            checks.append(
                Check(
                    "label_range",
                    FAIL,
                    f"{len(bad)} of {n} labels are outside [0, {ncls}) for {ncls} class names "
                    f"(values {values[:SHOW_IDS]}) — e.g. {_listing(task, bad)}",
                    len(bad),
                    _ids(task, bad),
                )
            )
        else:
            checks.append(Check("label_range", PASS, f"every label is in [0, {ncls})"))
    else:
        checks.append(
            Check(
                "label_range",
                WARN,
                "neither the campaign (task.class_names) nor the task names the classes: "
                "the label range and the id -> name mapping cannot be checked",
            )
        )

    if scan.meanings is not None and ncls:
        checks.append(_meaning_check(task, scan, names))
    if ncls:
        checks.append(_name_field_check(task, scan, names))

    task_names = list(task.class_names or [])
    twice = sorted({x for x in task_names if task_names.count(x) > 1})
    if twice:
        checks.append(
            Check(
                "class_names",
                FAIL,
                f"the task's class names use {', '.join(map(repr, twice))} twice",
                len(twice),
            )
        )
    elif declared and task_names and list(declared) != task_names:
        diffs = [
            f"id {k}: declared {_name(declared, k)!r}, the task says {_name(task_names, k)!r}"
            for k in range(max(len(declared), len(task_names)))
            if _name(declared, k) != _name(task_names, k)
        ]
        checks.append(
            Check(
                "class_names",
                FAIL,
                f"the declared class_names disagree with the task's ({'; '.join(diffs[:4])})",
                len(diffs),
            )
        )
    else:
        source = "declared" if declared else "the task's"
        checks.append(Check("class_names", PASS, f"{ncls} class names ({source}), each used once"))

    counts = collections.Counter(scan.labels)
    if n > 1 and len(counts) == 1:
        (only,) = counts
        checks.append(
            Check(
                "single_class",
                FAIL,
                f"every one of the {n} labels is class {only}"
                + (f" {names[only]!r}" if 0 <= only < ncls else "")
                + ": a model that always answers it reaches the best loss, and nothing is learnt "
                "(check the label column and the collate)",
                n,
            )
        )
    if ncls:
        unseen = [k for k in range(ncls) if counts[k] == 0]
        if unseen:
            checks.append(
                Check(
                    "class_coverage",
                    WARN,
                    "class "
                    + ", ".join(f"{k} {names[k]!r}" for k in unseen[:SHOW_IDS])
                    + f" never appears in the {n} labels: the mapping is not a bijection with the data",
                    len(unseen),
                )
            )
        else:
            checks.append(Check("class_coverage", PASS, f"each of the {ncls} classes appears in the labels"))
    return checks


def _class_output_check(task: Task, scan: ClassScan, output: ModelOutput) -> Check:
    """Class ids must index the model's logits; a one-logit (BCE) head takes 0 and 1."""
    if output.size is None:
        return Check("label_range_model", FAIL, f"{output.error}: training will fail the same way")
    if output.size == 1 and task.loss is None:
        return Check(
            "label_range_model",
            FAIL,
            "the model outputs one logit but the task has no loss of its own: cross-entropy over a single "
            "class is 0 whatever the weights, so nothing is learnt — give the task a BCE loss "
            "(task.loss) or the model two logits",
        )
    size = 2 if output.size == 1 else output.size
    bad = [i for i, y in zip(scan.indices, scan.labels, strict=True) if not 0 <= y < size]
    head = "one logit (a binary head: labels 0 and 1)" if output.size == 1 else f"{output.size} logits"
    if not bad:
        return Check("label_range_model", PASS, f"every label is in [0, {size}): the model outputs {head}")
    values = sorted({scan.labels[i] for i in bad})
    return Check(
        "label_range_model",
        FAIL,
        f"{len(bad)} of {len(scan.indices)} labels are outside [0, {size}) but the model outputs {head} "
        f"(values {values[:SHOW_IDS]}): the loss raises IndexError (a device-side assert on a GPU) — "
        f"e.g. {_listing(task, bad)}",
        len(bad),
        _ids(task, bad),
    )


@functools.lru_cache(maxsize=4096)
def _norm_name(value: Any) -> str:
    # Cached: a dataset repeats a handful of class names across every example.
    return " ".join(str(value).split()).casefold()


def name_fields(task: Task, names: Sequence[str]) -> list[str]:
    """Example fields whose values are class names: every example holds one of `names` there,
    and at least two different ones (a `label` / `category` column kept beside the ids)."""
    known = {_norm_name(x) for x in names}
    first = task.examples[0] if task.examples else {}
    out = []
    for key, value in first.items():
        if not isinstance(value, str):
            continue
        seen = set()
        for ex in task.examples:
            v = ex.get(key)
            if not isinstance(v, str) or _norm_name(v) not in known:
                break
            seen.add(_norm_name(v))
        else:
            if len(seen) > 1:
                out.append(str(key))
    return out


def _name_field_check(task: Task, scan: ClassScan, names: Sequence[str]) -> Check:
    """names[id] against an example field that holds the names; "unverified" when nothing can."""
    fields = name_fields(task, names)
    if not fields:
        if scan.meanings is not None:
            return Check(
                "name_field", PASS, "no example field holds the class names (label_meaning checks them)"
            )
        return Check(
            "name_field",
            WARN,
            "mapping unverified: nothing ties the class ids to their names (no task.label_meaning and no "
            "example field holding the names) — read id -> name on the shown examples before trusting it",
        )
    best: tuple[str, list[int]] | None = None
    for key in fields:
        wrong = [
            i
            for i, y in zip(scan.indices, scan.labels, strict=True)
            if 0 <= y < len(names) and _norm_name(names[y]) != _norm_name(task.examples[i][key])
        ]
        if best is None or len(wrong) < len(best[1]):
            best = (key, wrong)
    assert best is not None
    key, wrong = best
    if not wrong:
        return Check("name_field", PASS, f"names[id] equals the example field {key!r} in every example")
    by_id: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for i, y in zip(scan.indices, scan.labels, strict=True):
        by_id[y][str(task.examples[i][key])] += 1
    parts = [
        f"id {k} is named {names[k]!r} but its examples say {key}={by_id[k].most_common(1)[0][0]!r}"
        for k in sorted({scan.labels[i] for i in wrong})[:4]
    ]
    data_says = ", ".join(
        f"{k}={by_id[k].most_common(1)[0][0]}" for k in sorted(by_id) if 0 <= k < len(names)
    )
    return Check(
        "name_field",
        FAIL,
        f"the class names disagree with the example field {key!r} in {len(wrong)} of {len(scan.indices)} "
        f"examples: {'; '.join(parts)} (the data says {data_says}; names built in another order than "
        f"the label ids?) — e.g. {_listing(task, wrong)}",
        len(wrong),
        _ids(task, wrong),
    )


def _name(names: Sequence[str], k: int) -> str:
    return names[k] if 0 <= k < len(names) else "(none)"


def _meaning_check(task: Task, scan: ClassScan, names: Sequence[str]) -> Check:
    assert scan.meanings is not None
    by_id: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    wrong: list[int] = []
    for i, y, meaning in zip(scan.indices, scan.labels, scan.meanings, strict=True):
        by_id[y][meaning] += 1
        if 0 <= y < len(names) and names[y] != meaning:
            wrong.append(i)
    if not wrong:
        return Check("label_meaning", PASS, "every label's name matches what the example means")
    first_ids = sorted({scan.labels[i] for i in wrong})
    parts = [
        f"id {k} is named {names[k]!r} but its examples are {by_id[k].most_common(1)[0][0]!r}"
        for k in first_ids[:4]
    ]
    data_says = ", ".join(
        f"{k}={by_id[k].most_common(1)[0][0]}" for k in sorted(by_id) if 0 <= k < len(names)
    )
    return Check(
        "label_meaning",
        FAIL,
        f"the class names disagree with what the labels mean in {len(wrong)} of {len(scan.indices)} "
        f"examples: {'; '.join(parts)} (the data says {data_says}) — e.g. {_listing(task, wrong)}",
        len(wrong),
        _ids(task, wrong),
    )


def class_counts(scan: ClassScan, names: Sequence[str]) -> list[dict[str, Any]]:
    counts = collections.Counter(scan.labels)
    ids = sorted(set(counts) | set(range(len(names))))
    return [{"id": k, "name": _name(names, k), "count": counts[k]} for k in ids]


def show_classification(
    task: Task,
    indices: Sequence[int],
    scan: ClassScan,
    names: Sequence[str],
    split_of: Mapping[int, str],
    name_field: str = "",
) -> list[dict[str, Any]]:
    """Id -> name per shown example, with what the example means when the task can say."""
    shown = []
    batch = task.collate([task.examples[i] for i in indices], 0)
    for r, index in enumerate(indices):
        y = scan.labels[index]
        item: dict[str, Any] = {
            "index": index,
            "id": example_id(task, index),
            "split": split_of.get(index, ""),
            "label": y,
            "name": _name(names, y),
        }
        flags = []
        if scan.meanings is not None:
            item["meaning"] = scan.meanings[index]
            if names and item["name"] != item["meaning"]:
                flags.append("name disagrees with meaning")
        if names and not 0 <= y < len(names):
            flags.append("label out of range")
        if name_field and 0 <= y < len(names):
            item[name_field] = str(task.examples[index][name_field])
            if _norm_name(names[y]) != _norm_name(item[name_field]):
                flags.append(f"name disagrees with {name_field}")
        if "features" in batch:
            values = batch["features"][r].reshape(-1)[:8].tolist()
            more = " …" if batch["features"][r].numel() > 8 else ""
            item["input"] = ", ".join(f"{v:.3g}" for v in values) + more
        elif "input_ids" in batch:
            # Text classification: the real tokens, decoded, as the model gets them.
            real = _real_mask(batch)[r]
            pieces = [_piece(task, int(t)) for t in batch["input_ids"][r][real].tolist()]
            sep = "" if task.decode_token is not None else " "
            item["input"] = sep.join(pieces)
        item["flags"] = flags
        item["text"] = f"{y} -> {item['name']}" + (f" (means {item['meaning']})" if "meaning" in item else "")
        shown.append(item)
    return shown


# ------------------------------------------------------------------------------------------
# The whole inspection


def pick_shown(first: Sequence[int], offenders: Sequence[int], k: int) -> list[int]:
    """The first `k` training examples, with the first offender of each failing check swapped in
    at the end, so what a check complains about is on screen."""
    extra = [i for i in dict.fromkeys(offenders) if i not in first[:k]][:k]
    base = list(first[: k - len(extra)])
    return base + extra


@paused_gc()
def inspect_task(
    task: Task,
    *,
    max_length: int,
    supervise_prompt: bool,
    declared_names: Sequence[str],
    show: int,
    microbatch: int,
    splits: Mapping[str, Sequence[int]],
    output: ModelOutput | None = None,
    digests: list[tuple[str, str]] | None = None,
) -> CheckResult:
    """Scan the whole dataset, run the checks, render `show` examples; see docs/checks.md.

    `output` is the model's output size from one forward (`model_output`); without it labels
    are not checked against the model. `digests` receives `seen_digests(task, max_length)`
    from the same collate pass."""
    split_of = {i: name for name, idx in splits.items() for i in idx}
    train = list(splits.get("train", [])) or list(range(len(task.examples)))
    details: dict[str, Any] = {"kind": task.kind, "examples_scanned": len(task.examples)}
    if task.kind == CAUSAL_LM:
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
    else:
        cscan = scan_classification(task, max_length, digests)
        names = class_names_in_use(task, declared_names)
        checks = classification_checks(task, cscan, declared_names, output)
        wrong_meaning = []
        if cscan.meanings is not None and names:
            wrong_meaning = [
                i
                for i, y, m in zip(cscan.indices, cscan.labels, cscan.meanings, strict=True)
                if 0 <= y < len(names) and names[y] != m
            ]
        out_of_range = [
            i for i, y in zip(cscan.indices, cscan.labels, strict=True) if names and not 0 <= y < len(names)
        ]
        fields = name_fields(task, names) if names else []
        wrong_field = [
            i
            for i, y in zip(cscan.indices, cscan.labels, strict=True)
            if fields
            and 0 <= y < len(names)
            and _norm_name(names[y]) != _norm_name(task.examples[i][fields[0]])
        ]
        shown = pick_shown(train, (wrong_meaning[:1] + out_of_range[:1] + wrong_field[:1]), show)
        details |= {
            "class_names": names,
            "class_names_source": "declared" if declared_names else ("task" if names else "none"),
            "num_classes": len(names),
            "label_min": min(cscan.labels),
            "label_max": max(cscan.labels),
            "class_counts": class_counts(cscan, names),
            "name_fields": fields,
            "output_size": output.size if output is not None and output.size is not None else -1,
            "examples": show_classification(task, shown, cscan, names, split_of, fields[0] if fields else ""),
        }
    verdict, reason = verdict_of(checks)
    details["checks"] = [c.as_dict() for c in checks]
    return CheckResult(verdict, reason, details)
