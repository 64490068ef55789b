"""Which GPU to rent, side by side: the kept configuration's fit on each common GPU, its hours
projected from the measured step, and the cost at the given prices (R19, pure).

The fit comes from the per-GPU need: measured on CUDA (peak reserved with the context), else the
fake-tensor estimate. The hours are measured on the GPU the pilot ran on; on another they are
*projected*: the measured step × the ratio of the two GPUs' dense peaks for the precision (a
compute-bound step; a memory-bound one scales with the bandwidth ratio, given beside it). A pilot
on a CPU projects nothing: its step says nothing of a GPU's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..machine.references import GpuReference, gpu_reference
from ..memory_estimate import gpu_mib

# The GPUs a renter compares, with their memory as offers name it (GB).
CANDIDATES: tuple[tuple[str, int], ...] = (
    ("NVIDIA H100 SXM", 80),
    ("NVIDIA H200", 141),
    ("NVIDIA A100 80GB SXM", 80),
    ("NVIDIA L40S", 48),
    ("NVIDIA GeForce RTX 4090", 24),
)


@dataclass(frozen=True)
class Candidate:
    name: str
    memory_gb: int
    fits: bool | None  # None: no per-GPU need known
    hours: float | None  # the priority work's hours on it; None: not projected
    basis: str  # measured | projected (compute: peak ratio) | not projected: why
    bandwidth_hours: float | None  # the same work scaled by memory bandwidth instead
    cost: float | None  # USD for those hours × GPUs, at the given price
    source: str


def _need_mib(plan: Any) -> tuple[float | None, str]:
    s = plan.sheet
    if s.gpu_need is not None:
        return float(s.gpu_need.need_mb), "measured"
    for entry in (plan.estimate or {}).get("configurations") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("name") == (s.kept or "control")
            and entry.get("need_mib")
        ):
            return float(entry["need_mib"]), "estimated"
    return None, ""


def _price(prices: Mapping[str, float], ref: GpuReference | None, name: str) -> float | None:
    for key, value in prices.items():
        k = key.lower().replace(" ", "")
        if ref is not None and (
            k in ref.model.lower().replace(" ", "") or ref.model.lower().replace(" ", "") in k
        ):
            return value
        if k in name.lower().replace(" ", ""):
            return value
    return None


def candidates(plan: Any, prices: Mapping[str, float] | None = None) -> list[Candidate]:
    """Every candidate GPU: fit, hours (measured or projected, labelled) and cost."""
    prices = prices or {}
    s = plan.sheet
    need, _ = _need_mib(plan)
    hours = sum(o.total_h for o in plan.package.order) if plan.package.order else None
    precision = s.precision or "fp32"
    on_gpu = s.device.startswith("cuda") and bool(s.gpu_names)
    measured = gpu_reference(s.gpu_names[0]) if on_gpu else None
    gpus = max(s.gpus, 1)
    out = []
    rows = list(CANDIDATES)
    if on_gpu and measured is not None and not any(gpu_reference(n) == measured for n, _ in rows):
        rows.insert(0, (s.gpu_names[0], 0))
    for name, memory_gb in rows:
        ref = gpu_reference(name)
        fits = None if need is None or not memory_gb else need <= gpu_mib(memory_gb)
        h, basis, bw = None, "", None
        if hours is None:
            basis = "not projected: nothing planned"
        elif not on_gpu:
            basis = "not projected: measured on a CPU"
        elif measured is None:
            basis = f"not projected: no datasheet peak for {s.gpu_names[0]}"
        elif ref == measured:
            h, basis = hours, "measured"
        elif ref is None:
            basis = "not projected: no datasheet peak"
        else:
            mine, _ = measured.peak_tflops(precision)
            theirs, column = ref.peak_tflops(precision)
            if mine and theirs:
                h = hours * mine / theirs
                bw = hours * measured.memory_gbps / ref.memory_gbps
                basis = f"projected: measured step × {mine:g}/{theirs:g} ({column} peaks)"
            else:
                basis = f"not projected: no {precision} peak for one of the two"
        price = _price(prices, ref, name)
        cost = round(h * price * gpus, 2) if h is not None and price is not None else None
        out.append(
            Candidate(
                name=ref.model if ref is not None else name,
                memory_gb=memory_gb,
                fits=fits,
                hours=round(h, 3) if h is not None else None,
                basis=basis,
                bandwidth_hours=round(bw, 3) if bw is not None else None,
                cost=cost,
                source=ref.source if ref is not None else "",
            )
        )
    return out


def candidate_lines(plan: Any, prices: Mapping[str, float] | None = None) -> list[str]:
    """The side-by-side block of `pilot-tui plan`."""
    need, how = _need_mib(plan)
    head = f"  {need:.0f} MiB per GPU ({how})" if need is not None else "  per-GPU need unknown"
    lines = ["", "Which GPU", head + "; hours of the priority work; cost at the given prices"]
    for c in candidates(plan, prices):
        fit = "fits" if c.fits else ("does not fit" if c.fits is False else "fit unknown")
        size = f"{c.memory_gb} GB" if c.memory_gb else "the pilot's GPU"
        hours = f"{c.hours:.2f} h" if c.hours is not None else "—"
        bw = f" (bandwidth-bound: {c.bandwidth_hours:.2f} h)" if c.bandwidth_hours is not None else ""
        cost = f" · ${c.cost:,.2f}" if c.cost is not None else ""
        lines.append(f"    {c.name:<16} {size:<15} {fit:<12} {hours}{bw}{cost} · {c.basis}")
    return lines
