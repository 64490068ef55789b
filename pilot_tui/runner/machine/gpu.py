"""The GPUs, measured through one narrow boundary (`GpuBoundary`): each method is one hardware
measurement or one NVML query. `cuda.py` implements it with torch and NVML; tests hand in doubles
of it and nothing else, so everything above — which pairs to copy, what becomes a figure — runs
as it does on a GPU box."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from itertools import permutations
from typing import Protocol

from ...analysis.machine.gpus import AllReduce, GpuFigure, PairCopy
from ...analysis.machine.references import LINK_ORDER, PCIE, pcie_gbps

# A copy between two GPUs that takes longer than this hung (a broken P2P path hangs, it does not fail).
COPY_DEADLINE_S = 10.0


@dataclass(frozen=True)
class GpuDevice:
    """One visible GPU as the boundary names it."""

    index: int
    name: str
    uuid: str = ""


@dataclass(frozen=True)
class Health:
    """NVML's view of one GPU's state; empty where NVML does not offer it."""

    throttle: tuple[str, ...] = ()
    ecc_uncorrected: int | None = None
    remap_pending: bool = False


class GpuBoundary(Protocol):
    """The hardware, one measurement per method."""

    def devices(self) -> list[GpuDevice]: ...

    def gemm_tflops(self, index: int, precision: str) -> float:
        """A large dense GEMM in the precision, timed on the GPU."""
        ...

    def memory_gbps(self, index: int) -> float:
        """A device-to-device copy within the GPU's memory (bytes read + written per second)."""
        ...

    def copy_checksums(self, src: int, dst: int) -> tuple[int, int]:
        """A known tensor made on `src`, copied to `dst`: (checksum sent, checksum received)."""
        ...

    def allreduce_busbw(self, indices: list[int]) -> float:
        """An all-reduce across the GPUs: bus bandwidth in GB/s (nccl-tests' definition)."""
        ...

    def link(self, a: int, b: int) -> str:
        """The link class between two GPUs as NVML reports it: nvlink, pcie or sys."""
        ...

    def pcie_link(self, index: int) -> tuple[int, int]:
        """(generation, width) of the GPU's PCIe link; (0, 0) if unknown."""
        ...

    def health(self, index: int) -> Health: ...

    def tf32(self) -> bool:
        """Whether an fp32 GEMM runs on TF32 tensor cores in this process."""
        ...


@dataclass
class GpuMeasurement:
    """Everything measured on the GPUs, as the judging functions take it."""

    figures: list[GpuFigure]
    pairs: list[PairCopy] = field(default_factory=list)
    allreduce: AllReduce | None = None
    tf32: bool = False
    notes: list[str] = field(default_factory=list)


def _timed_copy(boundary: GpuBoundary, src: int, dst: int, deadline_s: float) -> PairCopy:
    """The copy on its own thread: one that never returns is reported, not waited for."""
    box: dict[str, tuple[int, int] | BaseException] = {}

    def work() -> None:
        try:
            box["sums"] = boundary.copy_checksums(src, dst)
        except BaseException as exc:  # reported as the pair's result, never lost on the thread
            box["error"] = exc

    t = threading.Thread(target=work, name=f"pilot-machine-copy-{src}-{dst}", daemon=True)
    t.start()
    t.join(deadline_s)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    if "sums" not in box:
        return PairCopy(src, dst, sent=0, received=None)
    sent, received = box["sums"]  # type: ignore[misc]
    return PairCopy(src, dst, sent=sent, received=received)


def _soft(notes: list[str], what: str, fn, default=None):
    """One measurement that cannot be made says so and leaves the rest standing."""
    try:
        return fn()
    except Exception as exc:
        notes.append(f"{what}: {type(exc).__name__}: {exc}")
        return default


def measure_gpus(
    boundary: GpuBoundary, precision: str, host: str | None = None, deadline_s: float = COPY_DEADLINE_S
) -> GpuMeasurement:
    """Per GPU: GEMM, memory, health; across GPUs: every pair's copy, one all-reduce, the links."""
    host = host if host is not None else socket.gethostname()
    notes: list[str] = []
    devices = boundary.devices()
    figures = []
    for d in devices:
        h = _soft(notes, f"GPU {d.index} health", lambda d=d: boundary.health(d.index), Health())
        figures.append(
            GpuFigure(
                index=d.index,
                name=d.name,
                uuid=d.uuid,
                host=host,
                gemm_tflops=_soft(
                    notes, f"GPU {d.index} GEMM", lambda d=d: boundary.gemm_tflops(d.index, precision)
                ),
                memory_gbps=_soft(notes, f"GPU {d.index} memory", lambda d=d: boundary.memory_gbps(d.index)),
                throttle=h.throttle,
                ecc_uncorrected=h.ecc_uncorrected,
                remap_pending=h.remap_pending,
            )
        )
    result = GpuMeasurement(figures, tf32=bool(_soft(notes, "tf32", boundary.tf32, False)), notes=notes)
    if len(devices) < 2:
        return result
    indices = [d.index for d in devices]
    result.pairs = [
        p
        for a, b in permutations(indices, 2)
        if (
            p := _soft(
                notes, f"copy GPU {a} → GPU {b}", lambda a=a, b=b: _timed_copy(boundary, a, b, deadline_s)
            )
        )
    ]
    links: dict[str, int] = {}
    for i, a in enumerate(indices):
        for b in indices[i + 1 :]:
            kind = _soft(notes, f"link GPU {a}–{b}", lambda a=a, b=b: boundary.link(a, b), PCIE)
            links[kind] = links.get(kind, 0) + 1
    # The ring runs at its slowest hop: the worst link class any pair reports.
    worst = max(links, key=LINK_ORDER.index) if links else PCIE
    gens = [_soft(notes, f"GPU {i} PCIe link", lambda i=i: boundary.pcie_link(i), (0, 0)) for i in indices]
    known = [g for g in gens if pcie_gbps(*g)]
    gen, width = min(known, key=lambda g: pcie_gbps(*g) or 0.0) if known else (0, 0)
    busbw = _soft(notes, "all-reduce", lambda: boundary.allreduce_busbw(indices))
    result.allreduce = AllReduce(
        gpus=len(indices),
        busbw_gbps=busbw,
        link=worst,
        pcie_generation=gen,
        pcie_width=width,
        pairs_by_link=links,
    )
    return result
