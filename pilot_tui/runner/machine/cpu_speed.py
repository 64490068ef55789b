"""The CPU's dense GEMM and memory bandwidth, timed with torch. There is no datasheet peak to
compare them with (a CPU's depends on its SKU, its clocks and what else the host runs), so they
are recorded as figures, never as a ratio."""

from __future__ import annotations

import statistics
import time

import torch

GEMM_N = 1024
COPY_BYTES = 64 * 2**20  # far past any last-level cache: the copy streams through memory


def _median_s(fn, reps: int) -> float:
    fn()  # warm-up: thread pool, first touch of the pages
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_gflops(n: int = GEMM_N, reps: int = 5) -> float:
    """fp32 n×n matmul on the threads torch uses: 2n³ operations per product."""
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    out = torch.empty(n, n)
    seconds = _median_s(lambda: torch.matmul(a, b, out=out), reps)
    return 2 * n**3 / seconds / 1e9


def memory_gbps(nbytes: int = COPY_BYTES, reps: int = 5) -> float:
    """A tensor copy: every byte read once and written once, so 2 × size per copy."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    seconds = _median_s(lambda: dst.copy_(src), reps)
    return 2 * nbytes / seconds / 1e9
