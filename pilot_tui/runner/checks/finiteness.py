"""Finite or not, said first: a NaN never equals itself, so a bitwise comparison of a model that
diverged reports "weights differ" or "max |Δ| 0" instead of the real cause. The phases that save,
export, resume and reload check finiteness before they compare, and compare bitwise only what
is finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

# ctx.memo key: variant -> where its loss first turned non-finite ({"update", "phase"}).
MEMO = "non_finite"


def non_finite(named: Mapping[str, torch.Tensor]) -> list[tuple[str, int]]:
    """(name, count of NaN/inf values) for every floating tensor that holds any."""
    out = []
    for name, value in named.items():
        if torch.is_tensor(value) and value.is_floating_point() and value.numel():
            bad = int((~torch.isfinite(value.detach())).sum())
            if bad:
                out.append((name, bad))
    return out


def describe(bad: list[tuple[str, int]], total: int, what: str = "weight tensors") -> str:
    shown = ", ".join(f"{name}: {count} values" for name, count in bad[:3])
    more = f", and {len(bad) - 3} more" if len(bad) > 3 else ""
    return f"{len(bad)} of {total} {what} hold NaN or inf ({shown}{more})"


def note(memo: dict[str, Any], variant: str, update: int, phase: str) -> None:
    """Remember where a variant's loss first turned non-finite, for the phases that follow."""
    memo.setdefault(MEMO, {}).setdefault(variant, {"update": update, "phase": phase})


def since(memo: Mapping[str, Any], variant: str) -> str:
    where = memo.get(MEMO, {}).get(variant)
    if not where:
        return ""
    return f" (its loss turned non-finite at update {where['update']}, in {where['phase']})"


def weights_not_finite(model: torch.nn.Module, memo: Mapping[str, Any], variant: str) -> str | None:
    """A reason line when the model's weights hold NaN or inf, else None."""
    state = model.state_dict()
    bad = non_finite(state)
    if not bad:
        return None
    return f"the model's weights are not finite: {describe(bad, len(state))}{since(memo, variant)}"


def finite_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal where finite, and NaN / ±inf at the same places: two runs that diverged the
    same way are the same run."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(torch.isnan(a), torch.isnan(b)):
        return False
    return torch.equal(a[fa], b[fb]) and torch.equal(a[~fa & ~torch.isnan(a)], b[~fb & ~torch.isnan(b)])


def max_finite_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the positions finite in both (0.0 when there are none)."""
    both = torch.isfinite(a) & torch.isfinite(b)
    if not bool(both.any()):
        return 0.0
    return float((a[both].double() - b[both].double()).abs().max())
