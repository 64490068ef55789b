"""The interconnect, measured: an all-reduce of a declared size on the real process group (R22).

Bus bandwidth follows nccl-tests (PERFORMANCE.md): algorithm bandwidth = bytes / time, and for
an all-reduce bus bandwidth = algbw × 2 (n − 1) / n, the figure comparable with the link's peak
whatever the number of ranks. Latency is the median time of a one-element all-reduce.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from ..memory.probes import synchronize


def bus_bandwidth(nbytes: float, seconds: float, ranks: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s (10⁹ bytes) for an all-reduce of `nbytes` on `ranks`."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def _timed(t: torch.Tensor, device: torch.device, group: Any = None) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    dist.all_reduce(t, group=group)
    synchronize(device)
    return time.perf_counter() - t0


def measure_allreduce(
    size_mb: float, device: torch.device, iters: int = 5, group: Any = None
) -> dict[str, Any]:
    """All-reduce `size_mb` MiB of float32 `iters` times (after 2 warm-ups) on this rank, over
    the whole group or over `group` (this node's ranks, or one rank of each node)."""
    n = dist.get_world_size(group)
    big = torch.ones(max(1, int(size_mb * 2**20) // 4), dtype=torch.float32, device=device)
    tiny = torch.ones(1, dtype=torch.float32, device=device)
    for _ in range(2):
        _timed(big, device, group)
        _timed(tiny, device, group)
    times = sorted(_timed(big, device, group) for _ in range(iters))
    lat = statistics.median(_timed(tiny, device, group) for _ in range(max(iters, 10)))
    nbytes = big.numel() * 4
    median = statistics.median(times)
    algbw, busbw = bus_bandwidth(nbytes, median, n)
    return {
        "ranks": n,
        "backend": dist.get_backend(),
        "size_mb": round(nbytes / 2**20, 3),
        "iters": iters,
        "time_s": round(median, 6),
        "algbw_gbps": round(algbw, 4),
        "busbw_gbps": round(busbw, 4),
        "latency_us": round(lat * 1e6, 1),
    }
