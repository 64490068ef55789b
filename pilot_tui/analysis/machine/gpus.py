"""The GPUs' parts of the machine check, judged from measured figures (pure, no torch).

The figures come from the runner's measurement (or, in tests, from doubles at the NVML / CUDA
boundary); here they are compared with the datasheet (`references.py`), with each other, and
with the link NVML reports. Every message names the GPU by index, UUID and host.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...core.verdict import FAIL, PASS, WARN
from ..checks import Check
from .references import LINK_LABELS, LINK_ORDER, expected_busbw, gpu_reference, pcie_gbps

# A GPU this far below its peers' median slows every step of a data-parallel job to its pace.
OUTLIER_SHARE = 0.10
# Below this share of its reference, a figure warns. Large GEMMs and copies on a healthy GPU reach
# well above it; a throttled GPU, a wrong clock or a ring over the wrong link fall below.
LOW_SHARE = 0.5
# Throttle reasons that mean the GPU is slowed by something other than the work it is given.
BAD_THROTTLES = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake", "sw_thermal_slowdown")


@dataclass(frozen=True)
class GpuFigure:
    """What was measured on one GPU; None where it was not."""

    index: int
    name: str
    uuid: str = ""
    host: str = ""
    gemm_tflops: float | None = None
    memory_gbps: float | None = None
    throttle: tuple[str, ...] = ()
    ecc_uncorrected: int | None = None
    remap_pending: bool = False

    @property
    def label(self) -> str:
        uuid = f" ({self.uuid})" if self.uuid else ""
        host = f" on {self.host}" if self.host else ""
        return f"GPU {self.index}{uuid}{host}"


@dataclass(frozen=True)
class PairCopy:
    """A tensor copied from one GPU to another: the checksum sent and the one received (None:
    the copy did not finish before its deadline)."""

    src: int
    dst: int
    sent: int
    received: int | None


@dataclass(frozen=True)
class AllReduce:
    """An all-reduce across the GPUs and the link class NVML reports between them."""

    gpus: int
    busbw_gbps: float | None
    link: str
    pcie_generation: int = 0
    pcie_width: int = 0
    pairs_by_link: dict[str, int] = field(default_factory=dict)


def _labels(figures: Sequence[GpuFigure]) -> dict[int, str]:
    return {f.index: f.label for f in figures}


def gemm(figures: Sequence[GpuFigure], precision: str, tf32: bool = False) -> list[Check]:
    """Each GPU's dense GEMM against its datasheet's dense peak, then against its peers."""
    checks: list[Check] = []
    for f in figures:
        if f.gemm_tflops is None:
            continue
        ref = gpu_reference(f.name)
        peak, column = ref.peak_tflops(precision, tf32) if ref else (None, "")
        if peak is None:
            why = f"no {precision} peak for {ref.model}" if ref else f"no reference for {f.name!r}"
            checks.append(
                Check("gemm", PASS, f"{f.label}: {f.gemm_tflops:.4g} TFLOP/s {precision} GEMM ({why})")
            )
            continue
        share = f.gemm_tflops / peak
        verdict = WARN if share < LOW_SHARE else PASS
        checks.append(
            Check(
                "gemm",
                verdict,
                f"{f.label}: {f.gemm_tflops:.4g} TFLOP/s {precision} GEMM, {share:.0%} of the {ref.model} "
                f"{column} peak {peak:g} ({ref.source.split(',')[0]})",
            )
        )
    return checks + outliers(figures, "gemm_tflops", "TFLOP/s GEMM")


def outliers(figures: Sequence[GpuFigure], key: str, unit: str) -> list[Check]:
    """A GPU more than OUTLIER_SHARE below the median of the others, named."""
    measured = [(f, getattr(f, key)) for f in figures if getattr(f, key) is not None]
    if len(measured) < 2:
        return []
    found = []
    for f, value in measured:
        peers = statistics.median(v for g, v in measured if g is not f)
        if value < (1 - OUTLIER_SHARE) * peers:
            found.append(
                Check(
                    "outlier",
                    WARN,
                    f"{f.label} is slow: {value:.4g} {unit}, {1 - value / peers:.0%} below its "
                    f"{len(measured) - 1} peers' median {peers:.4g}; a data-parallel job runs at its pace",
                )
            )
    return found


def memory(figures: Sequence[GpuFigure]) -> list[Check]:
    """Each GPU's device-memory copy bandwidth against its datasheet."""
    checks = []
    for f in figures:
        if f.memory_gbps is None:
            continue
        ref = gpu_reference(f.name)
        if ref is None:
            checks.append(Check("memory", PASS, f"{f.label}: memory {f.memory_gbps:.4g} GB/s (no reference)"))
            continue
        share = f.memory_gbps / ref.memory_gbps
        checks.append(
            Check(
                "memory",
                WARN if share < LOW_SHARE else PASS,
                f"{f.label}: memory {f.memory_gbps:.4g} GB/s, {share:.0%} of the {ref.model} "
                f"datasheet {ref.memory_gbps:g} GB/s",
            )
        )
    return checks + outliers(figures, "memory_gbps", "GB/s memory")


def copies(pairs: Sequence[PairCopy], figures: Sequence[GpuFigure], deadline_s: float) -> list[Check]:
    """Every pair's copy arrived whole: a wrong or zero checksum, or a copy that hung, fails."""
    labels = _labels(figures)
    bad = []
    for p in pairs:
        route = f"{labels.get(p.src, f'GPU {p.src}')} → {labels.get(p.dst, f'GPU {p.dst}')}"
        if p.received is None:
            bad.append(f"{route} did not finish within {deadline_s:g} s")
        elif p.received == 0 and p.sent != 0:
            bad.append(f"{route} copied zeros (checksum 0, sent {p.sent})")
        elif p.received != p.sent:
            bad.append(f"{route} copied wrong data (checksum {p.received}, sent {p.sent})")
    if bad:
        return [
            Check(
                "copies",
                FAIL,
                "GPU-to-GPU copies are wrong: " + "; ".join(bad) + " (peer-to-peer is broken on this "
                "box: NCCL_P2P_DISABLE=1 routes copies through host memory, at a bandwidth cost)",
                count=len(bad),
            )
        ]
    if not pairs:
        return []
    return [Check("copies", PASS, f"{len(pairs)} GPU-to-GPU copies arrived whole (checksums equal)")]


def allreduce(result: AllReduce, figures: Sequence[GpuFigure]) -> list[Check]:
    """The all-reduce's bus bandwidth against the figure for the link class NVML reports."""
    if result.busbw_gbps is None:
        return []
    names = {gpu_reference(f.name) for f in figures}
    nvlink = min((r.nvlink_gbps for r in names if r and r.nvlink_gbps), default=None)
    pcie = pcie_gbps(result.pcie_generation, result.pcie_width)
    want = expected_busbw(result.link, nvlink, pcie)
    link = LINK_LABELS.get(result.link, result.link)
    pairs = ", ".join(f"{n} {k}" for k in LINK_ORDER if (n := result.pairs_by_link.get(k)))
    seen = f"{link}{f' ({pairs} pairs)' if pairs else ''}"
    what = f"all-reduce on {result.gpus} GPUs: bus {result.busbw_gbps:.4g} GB/s over {seen}"
    if want.gbps is None:
        return [Check("allreduce", PASS, f"{what}; no expected figure for this link ({want.source})")]
    share = result.busbw_gbps / want.gbps
    verdict = WARN if share < LOW_SHARE else PASS
    return [
        Check(
            "allreduce",
            verdict,
            f"{what}, {share:.0%} of the {result.link} figure {want.gbps:g} GB/s ({want.source})",
        )
    ]


def health(figures: Sequence[GpuFigure]) -> list[Check]:
    """NVML's throttle reasons and memory errors, where NVML offers them."""
    checks = []
    for f in figures:
        said = []
        slowed = [t for t in f.throttle if t in BAD_THROTTLES]
        if slowed:
            said.append(f"clocks held down ({', '.join(slowed)})")
        if f.ecc_uncorrected:
            said.append(f"{f.ecc_uncorrected} uncorrected ECC errors since the driver loaded")
        if f.remap_pending:
            said.append("a memory row remap is pending (reset the GPU before a long run)")
        if said:
            checks.append(Check("health", WARN, f"{f.label}: " + "; ".join(said)))
    return checks
