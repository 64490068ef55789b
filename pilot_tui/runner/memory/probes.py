"""Memory counters per phase: the CUDA caching allocator, or the process RSS on CPU (R6).

Allocated (memory held by tensors) and reserved (held by the caching allocator) are different
counters and are never added. Peaks are reset at the start of every phase, after the garbage of
the previous one is collected and the allocator's cache emptied: resetting a peak sets it to the
*current* reserve, so without that a phase would inherit what the previous one left cached.

Only the campaign's own devices are touched: synchronising or resetting a GPU creates a CUDA
context on it (~0.5 GiB on an H100), memory another job on that GPU then loses — and on a GPU in
exclusive-process mode, or held by another job, it raises.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import torch

from ...core.rows import Memory
from .nvml_view import NvmlView

MIB = 1024 * 1024
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
_COUNTS = ("num_alloc_retries", "num_ooms")


def _vm_hwm_bytes() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    # Writing 5 resets the kernel's high-water mark of this process's RSS (Linux ≥ 4.0).
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so timings and counters describe finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release_cache(device: torch.device) -> None:
    """Collect unreachable tensors and hand the allocator's unused blocks back to the driver.

    CUDA only: there a tensor kept alive by a reference cycle holds allocator blocks that the next
    phase's peak would inherit. On CPU nothing is cached to hand back and the RSS high-water mark
    is reset anyway, while a full collection costs ~0.1 s per phase (measured on the demo).
    """
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def forget_peaks(device: torch.device) -> None:
    """Drop what a check inside a phase allocated from the phase's peaks: its blocks go back to
    the driver and the high-water marks start again from here (the lifetime counts are kept).
    `first_step`'s objective checks run before the update; the row's peaks are the update's."""
    synchronize(device)
    release_cache(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        _reset_peak_rss()


class MemoryProbe:
    """Start at a phase boundary, stop at the next; `stop()` returns the phase's counters in MiB.

    `devices` are the CUDA devices the campaign uses (default: the runner's own); no other GPU
    is ever synchronised, reset or read through the allocator.
    """

    def __init__(self, device: torch.device, devices: Sequence[torch.device] | None = None) -> None:
        self.device = device
        self.devices = list(devices) if devices else [device]
        self.process = psutil.Process()
        self._baseline: dict[str, float] = {}
        self._peak_reset = False
        # Lifetime allocator counts at the start: reset_peak_memory_stats leaves them alone.
        self._counts: dict[str, int] = {}

    def start(self) -> None:
        synchronize(self.device)
        release_cache(self.device)
        if self.device.type == "cuda":
            self._baseline = {
                "baseline_allocated_mb": torch.cuda.memory_allocated(self.device) / MIB,
                "baseline_reserved_mb": torch.cuda.memory_reserved(self.device) / MIB,
            }
            stats = torch.cuda.memory_stats(self.device)
            self._counts = {k: int(stats.get(k, 0)) for k in _COUNTS}
            for device in self.devices:
                # Every campaign device's peak is reset at the same boundary (R6: same limits).
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
        else:
            self._peak_reset = _reset_peak_rss()
            self._baseline = {"baseline_rss_mb": self.process.memory_info().rss / MIB}

    def baseline(self) -> dict[str, float]:
        """The counters read at `start()`: all a row can hold when `stop()` itself failed."""
        return {k: round(v, 3) for k, v in self._baseline.items()}

    def stop(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            for device in self.devices:
                torch.cuda.synchronize(device)
        synchronize(self.device)
        out = dict(self._baseline)
        if self.device.type == "cuda":
            stats = torch.cuda.memory_stats(self.device)
            out |= {
                "allocated_mb": torch.cuda.memory_allocated(self.device) / MIB,
                "reserved_mb": torch.cuda.memory_reserved(self.device) / MIB,
                "peak_allocated_mb": torch.cuda.max_memory_allocated(self.device) / MIB,
                "peak_reserved_mb": torch.cuda.max_memory_reserved(self.device) / MIB,
            }
            # Counted during this phase: an earlier phase's out-of-memory is not this phase's.
            out |= {k: float(int(stats.get(k, 0)) - self._counts.get(k, 0)) for k in _COUNTS}
            # NVML beside the allocator: it also sees the CUDA context and other processes (R6).
            out |= _nvml().memory(self.device.index or 0)
        else:
            rss = self.process.memory_info().rss / MIB
            hwm = _vm_hwm_bytes()
            out["rss_mb"] = rss
            # Without a resettable high-water mark the lifetime peak would mislead: say so.
            out["peak_rss_mb"] = hwm / MIB if (hwm is not None and self._peak_reset) else rss
        rounded = {k: round(v, 3) for k, v in out.items()}
        if self.device.type == "cuda" and len(self.devices) > 1:
            # Every campaign GPU with the same measurement limits (R6), and no other.
            rounded["gpus"] = [_device_counters(d.index or 0) for d in self.devices]
        return rounded

    def peak_mb(self, counters: dict[str, float]) -> float:
        """The figure a memory ceiling is compared with (rows.Memory.peak decides which)."""
        return Memory.from_toml(counters).peak() or 0.0


_NVML: NvmlView | None = None


def _nvml() -> NvmlView:
    global _NVML
    if _NVML is None:
        _NVML = NvmlView()
    return _NVML


def _device_counters(index: int) -> dict[str, float]:
    """Current and peak allocator counters of one device, with NVML's view of it."""
    out = {
        "index": float(index),
        "allocated_mb": torch.cuda.memory_allocated(index) / MIB,
        "reserved_mb": torch.cuda.memory_reserved(index) / MIB,
        "peak_allocated_mb": torch.cuda.max_memory_allocated(index) / MIB,
        "peak_reserved_mb": torch.cuda.max_memory_reserved(index) / MIB,
    } | _nvml().memory(index)
    return {k: round(v, 3) for k, v in out.items()}


def live_counters(device: torch.device) -> dict[str, float]:
    """Cheap counters for the live pane, read between steps."""
    if device.type == "cuda":
        return {
            "allocated_mb": torch.cuda.memory_allocated(device) / MIB,
            "reserved_mb": torch.cuda.memory_reserved(device) / MIB,
            "peak_allocated_mb": torch.cuda.max_memory_allocated(device) / MIB,
            "peak_reserved_mb": torch.cuda.max_memory_reserved(device) / MIB,
        }
    return {"rss_mb": _own_process().memory_info().rss / MIB}


_PROCESS: psutil.Process | None = None


def _own_process() -> psutil.Process:
    """This process's psutil handle, made once (making one reads /proc each time; the counters
    thread asks twice a second while a phase runs)."""
    global _PROCESS
    if _PROCESS is None or _PROCESS.pid != os.getpid():  # a forked child gets its own
        _PROCESS = psutil.Process()
    return _PROCESS


def tensor_mb(tensors) -> float:
    """MiB held by these tensors (their elements, not their storage's spare room)."""
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def host_rss_mb(exclude: Sequence[int] = ()) -> tuple[float, int]:
    """MiB resident in this process and every process it started (the loader's workers, a
    fresh process), and how many there are: what the host's memory must hold of this run.
    `exclude`: processes of the pilot's own (the template process) and theirs."""
    me = _own_process()
    total, count = me.memory_info().rss, 1
    skipped: set[int] = set(exclude)
    for child in me.children(recursive=True):
        try:
            if child.pid in skipped or child.ppid() in skipped:
                skipped.add(child.pid)
                continue
            total += child.memory_info().rss
            count += 1
        except psutil.Error:  # it ended between the listing and the read
            continue
    return total / MIB, count


def device_reserve(device: torch.device) -> tuple[float, float, float] | None:
    """(reserved, allocated, the GPU's total) MiB on a CUDA device; None elsewhere. Reserved
    minus allocated is what the caching allocator holds in blocks no tensor uses: its growth
    over a steady loop is fragmentation that can end a long run in an out-of-memory."""
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    return (
        torch.cuda.memory_reserved(device) / MIB,
        torch.cuda.memory_allocated(device) / MIB,
        total / MIB,
    )
