"""The CPU's dense GEMM and memory bandwidth, timed with torch. There is no datasheet peak to
compare them with (a CPU's depends on its SKU, its clocks and what else the host runs), so they
are recorded as figures, never as a ratio."""

from __future__ import annotations

import math
import statistics
import time

import torch

# A product per thread this size runs at the CPU's plateau (measured on the 2-core VM, one thread:
# 113 GFLOP/s at 512, 114 at 1024, in 16 ms rather than 130): the side grows with the cube root
# of the threads, so each thread's share, and the time, stay about the same on a large host.
GEMM_N_PER_THREAD = 512
COPY_BYTES = 64 * 2**20  # far past any last-level cache: the copy streams through memory


def _median_s(fn, reps: int) -> float:
    fn()  # warm-up: thread pool, first touch of the pages
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_side() -> int:
    """The GEMM's side for the threads torch uses (a multiple of 64)."""
    n = GEMM_N_PER_THREAD * max(1, torch.get_num_threads()) ** (1 / 3)
    return int(math.ceil(n / 64) * 64)


def gemm_gflops(n: int | None = None, reps: int = 5) -> float:
    """fp32 n×n matmul on the threads torch uses: 2n³ operations per product."""
    n = n or gemm_side()
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
