"""Checks of the objective taken from failures that really happen (R26), as plain functions.

Each takes tensors or a callable and returns a small result object, so any loop can call it: the
pilot's own phases (`first_step`, `final`) and an adapter around someone else's trainer. No phase
plumbing here, no spec, no record.

- `compare_accumulation`: one update's loss and gradient computed as (microbatch m, accumulation
  a) and as (1, m·a) from the same state must agree (the per-microbatch-mean bug).
- `reference_loss`: a task's own loss against a masked cross-entropy from the same logits.
- `doubled_first_token`: rows that start with their BOS twice.
- `compare_generations` / `unstopped`: batched greedy replies against one-at-a-time ones, and
  replies that never reached an end token.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

# fp32 sums taken in another order differ by ~1e-6; a per-microbatch mean is off by 10 % or more
# as soon as lengths vary. Half precision rounds each microbatch's activations differently.
ACCUMULATION_RTOL = {"fp32": 1e-3, "bf16": 3e-2, "fp16": 3e-2}
# The task's loss per target against the reference: closer than this is the same objective.
REFERENCE_RTOL = 1e-3


@contextlib.contextmanager
def rng_untouched(devices: Sequence[torch.device] = ()) -> Iterator[None]:
    """Run a check without moving any random stream the training loop reads afterwards (a collate
    may draw from Python's `random`, a forward from torch's): the campaign measures the same
    whether the check ran or not."""
    py = random.getstate()
    cuda = [d for d in devices if d.type == "cuda"]
    with torch.random.fork_rng(devices=cuda, enabled=True):
        try:
            yield
        finally:
            random.setstate(py)


# ------------------------------------------------------------------------------- accumulation


def groupings(
    indices: Sequence[int], microbatch: int, accumulation: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The same examples as (m, a) and as (1, m·a). A campaign at microbatch 1 has nothing to
    split, so its examples are paired: (2, a/2) against (1, a) — what a per-microbatch mean
    gets wrong is the same (every microbatch weighs alike, whatever its number of targets)."""
    ids = list(indices)
    m = microbatch if microbatch > 1 else 2
    ids = ids[: len(ids) - len(ids) % m]
    wide = [ids[i : i + m] for i in range(0, len(ids), m)]
    return wide, [[i] for i in ids]


def gradient_fingerprint(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """Per parameter tensor: its gradient's norm, sum and dot product with the weights, in
    float64 on the host. Three numbers a tensor, so no second copy of the gradients is held
    (on a GPU that would be a model's size), yet a gradient scaled or reweighted anywhere moves
    them. A parameter without gradient contributes zeros."""
    rows = []
    for p in params:
        g = p.grad
        if g is None:
            rows.append(torch.zeros(3, dtype=torch.float64))
            continue
        g = g.detach().double()
        rows.append(torch.stack([g.norm(), g.sum(), (g * p.detach().double()).sum()]).cpu())
    return torch.stack(rows) if rows else torch.zeros((0, 3), dtype=torch.float64)


@dataclass(frozen=True)
class Window:
    """One update's loss and gradient, computed without stepping."""

    loss: float
    grad_norm: float
    fingerprint: torch.Tensor


def window(
    compute: Callable[[Sequence[Any]], torch.Tensor],
    params: Sequence[torch.nn.Parameter],
    batches: Sequence[Any],
) -> Window:
    """`compute(batches)` runs forward and backward over one update's microbatches the way the
    loop does (its normalisation included) and returns the update's loss; the gradients it
    leaves are read, then dropped. The optimizer never steps."""
    for p in params:
        p.grad = None
    loss = float(compute(batches))
    fp = gradient_fingerprint(params)
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    norm = float(torch.sqrt(sum((g * g).sum() for g in grads))) if grads else 0.0
    for p in params:
        p.grad = None
    return Window(loss, norm, fp)


def _rel(a: float | torch.Tensor, b: float | torch.Tensor) -> float:
    a_t, b_t = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    scale = max(float(b_t.norm()), float(a_t.norm()), 1e-12)
    return float((a_t - b_t).norm()) / scale


@dataclass(frozen=True)
class AccumulationCheck:
    """The update as (m, a) against (1, m·a): both losses, both gradient norms, the relative
    differences and the tolerance they were held to."""

    wide: tuple[int, int]
    narrow: tuple[int, int]
    loss_wide: float
    loss_narrow: float
    grad_norm_wide: float
    grad_norm_narrow: float
    loss_rel_diff: float
    grad_rel_diff: float
    tolerance: float
    lengths: tuple[int, ...]  # supervised targets per example: the check needs them to vary

    @property
    def ok(self) -> bool:
        return self.loss_rel_diff <= self.tolerance and self.grad_rel_diff <= self.tolerance

    @property
    def lengths_vary(self) -> bool:
        return len(set(self.lengths)) > 1

    @property
    def factor(self) -> float:
        """How many times the gradient of the cut update is the whole one's (1 when they agree)."""
        return self.grad_norm_narrow / self.grad_norm_wide if self.grad_norm_wide else float("inf")

    def message(self, unit: str = "supervised targets") -> str:
        (m, a), (m1, a1) = self.wide, self.narrow
        same = (
            f"loss {self.loss_wide:.6g} vs {self.loss_narrow:.6g}, gradient norm "
            f"{self.grad_norm_wide:.6g} vs {self.grad_norm_narrow:.6g}"
        )
        if self.ok:
            return (
                f"the update as (microbatch {m}, accumulation {a}) equals (microbatch {m1}, accumulation "
                f"{a1}) within {self.tolerance:g}: {same}"
            )
        return (
            f"the same examples give another update as (microbatch {m}, accumulation {a}) than as "
            f"(microbatch {m1}, accumulation {a1}): {same} (relative differences {self.loss_rel_diff:.3g} "
            f"and {self.grad_rel_diff:.3g}, over {self.tolerance:g}) — the loss is normalised per "
            f"microbatch, not by the {unit} of the whole update, so the accumulation setting changes "
            "what is trained"
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out |= {"ok": self.ok, "wide": list(self.wide), "narrow": list(self.narrow)}
        out["lengths"] = list(self.lengths)
        out["lengths_vary"] = self.lengths_vary
        return out


def compare_accumulation(
    compute: Callable[[Sequence[Any]], torch.Tensor],
    params: Sequence[torch.nn.Parameter],
    wide: Sequence[Any],
    narrow: Sequence[Any],
    *,
    lengths: Sequence[int],
    tolerance: float = ACCUMULATION_RTOL["fp32"],
) -> AccumulationCheck:
    """`wide` and `narrow` are the same examples collated as (m, a) and as (1, m·a) microbatches;
    `compute` is as in `window`, called on each from the same state (the caller keeps the state
    and the random streams still, e.g. eval mode inside `rng_untouched`). `lengths` are the
    supervised targets per example, kept so a reader sees whether they varied."""
    a = window(compute, params, wide)
    b = window(compute, params, narrow)
    return AccumulationCheck(
        wide=(max(len(_rows(x)) for x in wide), len(wide)),
        narrow=(1, len(narrow)),
        loss_wide=a.loss,
        loss_narrow=b.loss,
        grad_norm_wide=a.grad_norm,
        grad_norm_narrow=b.grad_norm,
        loss_rel_diff=_rel(a.loss, b.loss),
        grad_rel_diff=_rel(a.fingerprint, b.fingerprint),
        tolerance=tolerance,
        lengths=tuple(int(x) for x in lengths),
    )


def _rows(batch: Any) -> Any:
    """What a microbatch's rows are counted on: its inputs (a dict's first value may be a label)."""
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        return batch["input_ids"] if "input_ids" in batch else next(iter(batch.values()))
    return batch


# ------------------------------------------------------------------------------- reference loss


@dataclass(frozen=True)
class ReferenceLoss:
    """The task's loss per supervised target against a masked cross-entropy of the same logits."""

    own: float
    reference: float
    targets: int
    tolerance: float = REFERENCE_RTOL

    @property
    def ratio(self) -> float:
        return self.own / self.reference if self.reference else float("inf")

    @property
    def ok(self) -> bool:
        return abs(self.own - self.reference) <= self.tolerance * max(abs(self.reference), 1e-12)

    def message(self) -> str:
        if self.ok:
            return (
                f"the task's loss equals a masked cross-entropy of the same logits ({self.own:.6g} per "
                f"target over {self.targets} targets)"
            )
        return (
            f"the task's loss is {self.own:.6g} per supervised target where a masked cross-entropy of the "
            f"same logits and labels gives {self.reference:.6g} (ratio {self.ratio:.4g}, {self.targets} "
            "targets): a mean where a sum is expected, ignored positions counted (label smoothing over "
            "-100), or another ignore index — expected only if the task means another objective"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio, "ok": self.ok}


def masked_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, *, shift: bool
) -> tuple[torch.Tensor, int]:
    """(sum of cross-entropy over supervised targets, their number); `shift`: causal LM, the
    logits at t predict the label at t + 1."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    flat, lab = logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1)
    keep = lab != ignore_index
    total = F.cross_entropy(flat, lab, ignore_index=ignore_index, reduction="sum")
    return total, int(keep.sum())


def reference_loss(
    own_sum: torch.Tensor | float,
    logits: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int = -100,
    *,
    shift: bool,
    tolerance: float = REFERENCE_RTOL,
) -> ReferenceLoss | None:
    """`own_sum`: the task's loss on this batch as the loop sums it (the sum over targets, divided
    later by the update's count). None when a cross-entropy cannot be formed from these logits (a
    one-logit binary head, soft labels): nothing to compare with."""
    if logits.dim() < 2 or logits.shape[-1] < 2 or labels.is_floating_point():
        return None
    if labels.shape != logits.shape[:-1]:
        return None
    total, count = masked_cross_entropy(logits.detach(), labels, ignore_index, shift=shift)
    if count == 0:
        return None
    return ReferenceLoss(float(own_sum) / count, float(total) / count, count, tolerance)


# ------------------------------------------------------------------------------- BOS


def doubled_first_token(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[int, int]:
    """(rows whose first two real tokens are the same id, that id or -1), counting only the id
    most rows start with — the BOS: a template that writes it and a tokenizer that adds it
    again give every example two. A reply that starts with its own first letter twice is
    content, not this."""
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        return 0, -1
    real = (
        attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    )
    # Left padding: the first real token of each row.
    start = real.long().argmax(1)
    rows = torch.arange(input_ids.shape[0])
    has_two = real.sum(1) >= 2
    first = input_ids[rows, start]
    second = input_ids[rows, (start + 1).clamp(max=input_ids.shape[1] - 1)]
    if not bool(has_two.any()):
        return 0, -1
    common = int(torch.mode(first[has_two]).values)
    doubled = has_two & (first == common) & (second == common)
    return int(doubled.sum()), common


# ------------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class GenerationCheck:
    """Batched greedy replies against one-at-a-time ones, per prompt."""

    single: tuple[tuple[int, ...], ...]
    batched: tuple[tuple[int, ...], ...]
    how: str

    @property
    def differing(self) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(self.single, self.batched, strict=True)) if a != b]

    @property
    def ok(self) -> bool:
        return not self.differing

    def as_dict(self) -> dict[str, Any]:
        return {
            "how": self.how,
            "ok": self.ok,
            "differing": self.differing,
            "single": [list(s) for s in self.single],
            "batched": [list(b) for b in self.batched],
        }


def compare_generations(
    single: Sequence[Sequence[int]], batched: Sequence[Sequence[int]], how: str
) -> GenerationCheck:
    return GenerationCheck(
        tuple(tuple(int(t) for t in s) for s in single), tuple(tuple(int(t) for t in b) for b in batched), how
    )


def unstopped(replies: Sequence[Sequence[int]], stop_ids: Sequence[int]) -> list[int]:
    """Indices of replies that do not end with one of `stop_ids` (they ran to the token budget)."""
    stops = {int(s) for s in stop_ids}
    return [i for i, r in enumerate(replies) if not r or int(r[-1]) not in stops]


@torch.no_grad()
def greedy_batched(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    prompts: Sequence[Sequence[int]],
    pad_id: int,
    budget: int,
    stop_ids: Sequence[int],
    device: torch.device,
    *,
    left: bool = True,
) -> list[list[int]]:
    """Greedy decoding of several prompts at once, padded on the left (`left`) or the right, with
    an attention mask — the way a server batches requests. `step(input_ids, attention_mask)`
    returns logits [rows, positions, vocab]. A reply ends after its first stop token."""
    stops = {int(s) for s in stop_ids}
    seqs = [list(map(int, p)) for p in prompts]
    done = [False] * len(seqs)
    out: list[list[int]] = [[] for _ in seqs]
    for _ in range(budget):
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        last = []
        for r, s in enumerate(seqs):
            if left:
                ids[r, width - len(s) :] = torch.tensor(s)
                mask[r, width - len(s) :] = 1
                last.append(width - 1)
            else:
                ids[r, : len(s)] = torch.tensor(s)
                mask[r, : len(s)] = 1
                last.append(len(s) - 1)
        logits = step(ids.to(device), mask.to(device))
        nxt = logits[
            torch.arange(len(seqs), device=logits.device), torch.tensor(last, device=logits.device)
        ].argmax(-1)
        for r, t in enumerate(nxt.tolist()):
            if done[r]:
                continue
            out[r].append(int(t))
            seqs[r].append(int(t))
            done[r] = int(t) in stops
        if all(done):
            break
    return out
