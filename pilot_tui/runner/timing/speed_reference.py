"""A fixed CPU workload timed just before and just after steady's timed loop.

On a virtual machine the host can slow the guest's vCPUs without the guest seeing it: no run
queue, no load average, no steal time shows it, yet the same code runs 1.5× slower for minutes.
A step time measured inside such a stretch is true for that stretch only. The same fixed work
timed on both sides of the loop shows whether the machine's speed moved while it was timed: the
plan then widens its range by that much and says why (`analysis/step_time.step_range`).

The work is a small float32 matmul chain on the calling thread's torch threads plus the Python
that drives it — the mix a CPU training loop spends its time in — and touches no random
generator, so a bitwise resume after steady is unaffected.
"""

from __future__ import annotations

import statistics
import time

import torch

# ~3 ms a repeat on a 2-core VM (~20 ms a call); the median of several repeats keeps one preempted repeat out.
_SIZE = 96
_CHAIN = 48
REPEATS = 5


def _once(a: torch.Tensor, w: torch.Tensor) -> float:
    t = time.perf_counter()
    x = a
    for _ in range(_CHAIN):
        x = torch.tanh(x @ w)
    float(x[0, 0])  # the result is used: nothing lazy is left untimed
    return time.perf_counter() - t


def reference_s(repeats: int = REPEATS) -> float:
    """Seconds the fixed workload takes now (the median of `repeats`), on the host CPU."""
    with torch.no_grad():
        a = torch.full((_SIZE, _SIZE), 0.5)
        w = torch.eye(_SIZE) * 0.9 + 0.001
        _once(a, w)  # its first run pays for allocations, not for the machine's speed
        return statistics.median(_once(a, w) for _ in range(repeats))
