"""The GPU boundary for real: torch on CUDA for the measurements, NVML for links and health.

Every NVML query fails soft (an older driver, a MIG slice, a consumer card without ECC): the
figure is left out and the check says what it could not read.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

import torch

from ...analysis.machine.references import NVLINK, PCIE, SYS
from .gpu import GpuDevice, Health

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GEMM_N = 8192  # large enough to run at the tensor cores' plateau on every GPU in the table
COPY_BYTES = 512 * 2**20
ALLREDUCE_BYTES = 256 * 2**20
# NVML's clock-event bits (nvml.h, nvmlClocksEventReasons), by the names the check reports.
_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
    0x100: "display_clock_setting",
}


def _median_s(device: torch.device, fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


class CudaNvml:
    """`GpuBoundary` on the visible CUDA devices, matched to NVML handles by UUID."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        try:
            import pynvml  # optional: without NVIDIA's library the health figures are left out

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception:
            return
        for d in self.devices():
            try:
                self._handles[d.index] = (
                    pynvml.nvmlDeviceGetHandleByUUID(d.uuid)
                    if d.uuid
                    else pynvml.nvmlDeviceGetHandleByIndex(d.index)
                )
            except Exception:
                continue

    def devices(self) -> list[GpuDevice]:
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uuid = str(getattr(p, "uuid", "") or "")
            out.append(
                GpuDevice(i, p.name, uuid if not uuid or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
            )
        return out

    def tf32(self) -> bool:
        return bool(torch.backends.cuda.matmul.allow_tf32)

    def gemm_tflops(self, index: int, precision: str) -> float:
        device = torch.device("cuda", index)
        dtype = _DTYPES.get(precision, torch.float32)
        a = torch.randn(GEMM_N, GEMM_N, device=device, dtype=dtype)
        b = torch.randn(GEMM_N, GEMM_N, device=device, dtype=dtype)
        out = torch.empty(GEMM_N, GEMM_N, device=device, dtype=dtype)
        seconds = _median_s(device, lambda: torch.matmul(a, b, out=out), reps=10)
        return 2 * GEMM_N**3 / seconds / 1e12

    def memory_gbps(self, index: int) -> float:
        device = torch.device("cuda", index)
        src = torch.ones(COPY_BYTES // 4, device=device)
        dst = torch.empty_like(src)
        seconds = _median_s(device, lambda: dst.copy_(src), reps=10)
        return 2 * COPY_BYTES / seconds / 1e9

    def copy_checksums(self, src: int, dst: int) -> tuple[int, int]:
        # A pattern no zeroed or stale buffer holds; its position-weighted sum catches reordering.
        n = 4 * 2**20
        values = torch.arange(1, n + 1, device=f"cuda:{src}", dtype=torch.int64) % 65521 + 1
        weights = torch.arange(1, n + 1, dtype=torch.int64) % 251 + 1
        sent = int((values.cpu() * weights).sum())
        moved = values.to(f"cuda:{dst}")
        torch.cuda.synchronize(dst)
        received = int((moved.cpu() * weights).sum())
        return sent, received

    def allreduce_busbw(self, indices: list[int]) -> float:
        # One process driving every GPU through NCCL's single-process API: the same rings and
        # links a torchrun job uses, without starting a process group.
        n = len(indices)
        tensors = [torch.ones(ALLREDUCE_BYTES // 4, device=f"cuda:{i}") for i in indices]

        def run() -> None:
            torch.cuda.nccl.all_reduce(tensors)

        run()
        for i in indices:
            torch.cuda.synchronize(i)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            run()
            for i in indices:
                torch.cuda.synchronize(i)
            times.append(time.perf_counter() - t0)
        algbw = ALLREDUCE_BYTES / statistics.median(times) / 1e9
        return algbw * 2 * (n - 1) / n

    def link(self, a: int, b: int) -> str:
        nvml = self._nvml
        ha, hb = self._handles[a], self._handles[b]
        try:
            if (
                nvml.nvmlDeviceGetP2PStatus(ha, hb, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                == nvml.NVML_P2P_STATUS_OK
            ):
                return NVLINK
        except Exception:
            pass
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(ha, hb)
        return SYS if level >= nvml.NVML_TOPOLOGY_SYSTEM else PCIE

    def pcie_link(self, index: int) -> tuple[int, int]:
        nvml, h = self._nvml, self._handles[index]
        return int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)), int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h))

    def health(self, index: int) -> Health:
        nvml, h = self._nvml, self._handles.get(index)
        if nvml is None or h is None:
            return Health()
        throttle: tuple[str, ...] = ()
        ecc = None
        pending = False
        try:
            reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            throttle = tuple(name for bit, name in _THROTTLE_BITS.items() if reasons & bit)
        except Exception:
            pass
        with contextlib.suppress(Exception):
            ecc = int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        with contextlib.suppress(Exception):
            pending = bool(nvml.nvmlDeviceGetRemappedRows(h)[2])
        return Health(throttle=throttle, ecc_uncorrected=ecc, remap_pending=pending)
