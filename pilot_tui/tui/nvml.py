"""NVML access for the Counters pane: the only place the UI process talks to the GPU driver.

The UI never creates a CUDA context (no torch here): it reads each device through NVML, like
nvitop. Every query fails soft — a device that cannot report its power or temperature shows
"n/a" instead of taking the pane down — and process lists, which cost milliseconds per call, are
never polled on the fast timer: they are listed at most every `PROCESS_PERIOD_S` and the last
list rides along in the snapshots between. The NVML library object is injected so tests can hand
a fake at this hardware boundary and nowhere else.

NVML numbers GPUs by their place on the PCI bus; CUDA (and so the runner's `cuda:0`) numbers the
GPUs `CUDA_VISIBLE_DEVICES` lets it see. Each sample carries the device UUID, which both agree on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
MIB = 1024 * 1024
# A process list costs ~4.5 ms per device (nvitop's measurement): never on the 2 Hz timer.
PROCESS_PERIOD_S = 5.0


@dataclass(frozen=True)
class GpuProcess:
    """One process holding memory on a GPU, as NVML reports it.

    Inside a container NVML reports the *host's* pid, which may name nothing (or something
    else) here: the Counters pane finds the runner by device and memory, not by pid alone.
    """

    pid: int
    used_mb: float | None


@dataclass(frozen=True)
class GpuSample:
    """One device at one instant; None means NVML could not say (never a made-up zero)."""

    index: int
    name: str
    memory_used_mb: float | None
    memory_total_mb: float | None
    utilization: int | None
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    uuid: str = ""
    pci_bus_id: str = ""
    # The last process list (refreshed every PROCESS_PERIOD_S); None until the first one.
    processes: tuple[GpuProcess, ...] | None = None


@dataclass(frozen=True)
class NvmlSnapshot:
    """Every device at one instant, or the reason NVML cannot be read (`error`)."""

    time: float
    gpus: tuple[GpuSample, ...] = ()
    driver: str = ""
    error: str = ""


def _reason(exc: BaseException) -> str:
    """One line saying why NVML is not usable, in the user's terms."""
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, ImportError):
        return "NVML: the pynvml module (nvidia-ml-py) is not installed"
    if "LibraryNotFound" in name or "Library Not Found" in text:
        return "NVML: driver not found (no libnvidia-ml: this machine has no NVIDIA driver)"
    if "DriverNotLoaded" in name or "Driver Not Loaded" in text:
        return "NVML: the NVIDIA driver is not loaded"
    if "NoPermission" in name:
        return "NVML: no permission to read the GPU"
    return f"NVML: {text or name}"


# What NVML sees of a process beyond the allocator's reserve: the CUDA context and libraries
# (~0.3-0.6 GiB); a process further above the runner's reserve than this is not the runner.
CONTEXT_SLACK_MB = 2048.0


def campaign_gpus(environment: dict[str, Any]) -> dict[str, str]:
    """UUID -> CUDA name (`cuda:0`) of the GPUs the campaign runs on, from the runner's environment."""
    device = str(environment.get("device", ""))
    if not device.startswith("cuda"):
        return {}
    index = int(device.partition(":")[2] or 0)
    for d in environment.get("devices") or []:
        if isinstance(d, dict) and int(d.get("index", -1)) == index and d.get("uuid"):
            return {str(d["uuid"]): f"cuda:{index}"}
    return {}


def match_runner(
    processes: Sequence[GpuProcess], reserved_mb: float | None, pid: int | None = None
) -> int | None:
    """The pid (as NVML reports it) of the runner among a GPU's processes, or None.

    By pid when NVML's pid is the runner's own; inside a container NVML gives host pids, so
    else by memory: the process whose NVML figure is at or just above the runner's reserve
    (the gap is its CUDA context). Called only for the campaign's GPU (matched by UUID).
    """
    if pid is not None and any(p.pid == pid for p in processes):
        return pid
    if reserved_mb is None:
        return None
    fits = [
        p
        for p in processes
        if p.used_mb is not None and reserved_mb <= p.used_mb <= reserved_mb + CONTEXT_SLACK_MB
    ]
    if not fits:
        return None
    return min(fits, key=lambda p: (p.used_mb or 0.0) - reserved_mb).pid


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


class NvmlProbe:
    """Reads every GPU through NVML; `open()` says why it cannot, `sample()` never raises."""

    def __init__(
        self,
        lib: Any = None,
        clock: Callable[[], float] = time.monotonic,
        process_period_s: float = PROCESS_PERIOD_S,
    ) -> None:
        self._lib = lib
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._uuids: list[str] = []
        self._buses: list[str] = []
        self.error = ""
        self.driver = ""
        self._opened = False
        self._clock = clock
        self._process_period_s = process_period_s
        self._next_processes = 0.0
        self._processes: list[tuple[GpuProcess, ...] | None] = []

    def open(self) -> str:
        """Initialise NVML once; returns "" when usable, else the reason (shown in the pane)."""
        if self._opened:
            return self.error
        self._opened = True
        try:
            if self._lib is None:
                import pynvml  # nvidia-ml-py: a pure-Python binding, cheap to import

                self._lib = pynvml
            self._lib.nvmlInit()
        except Exception as exc:
            self.error = _reason(exc)
            return self.error
        lib = self._lib
        count = self._query(lib.nvmlDeviceGetCount, default=0)
        for i in range(count or 0):
            handle = self._query(lib.nvmlDeviceGetHandleByIndex, i)
            if handle is None:
                continue
            self._handles.append(handle)
            name = self._query(lib.nvmlDeviceGetName, handle, default=f"GPU {i}")
            self._names.append(_text(name))
            self._uuids.append(
                _text(self._query(getattr(lib, "nvmlDeviceGetUUID", None), handle, default=""))
            )
            pci = self._query(getattr(lib, "nvmlDeviceGetPciInfo", None), handle)
            self._buses.append(_text(getattr(pci, "busId", "")) if pci is not None else "")
            self._processes.append(None)
        # The first process list waits one period: opening the pane stays instant.
        self._next_processes = self._clock() + self._process_period_s
        driver = self._query(lib.nvmlSystemGetDriverVersion, default="")
        self.driver = driver.decode() if isinstance(driver, bytes) else str(driver or "")
        if not self._handles:
            self.error = "NVML: no NVIDIA GPU found"
        return self.error

    @staticmethod
    def _query(fn: Callable[..., T] | None, *args: Any, default: T | None = None) -> T | None:
        # nvitop's nvmlQuery: one failed counter must not hide the others.
        if fn is None:
            return default
        try:
            return fn(*args)
        except Exception:
            return default

    def _list_processes(self, handle: Any) -> tuple[GpuProcess, ...] | None:
        lib = self._lib
        listing = getattr(lib, "nvmlDeviceGetComputeRunningProcesses", None)
        found = self._query(listing, handle)
        if found is None:
            return None
        out = []
        for proc in found:
            used = getattr(proc, "usedGpuMemory", None)
            # NVML_VALUE_NOT_AVAILABLE (2**64 - 1) when the driver cannot attribute memory.
            known = isinstance(used, int) and 0 <= used < 2**63
            out.append(GpuProcess(pid=int(getattr(proc, "pid", 0)), used_mb=used / MIB if known else None))
        return tuple(sorted(out, key=lambda p: -(p.used_mb or 0.0)))

    def sample(self) -> NvmlSnapshot:
        """Every device now (memory, utilisation, temperature, power); cheap calls only."""
        now = time.time()
        if self.open():
            return NvmlSnapshot(time=now, error=self.error)
        lib = self._lib
        gpus = []
        if self._clock() >= self._next_processes:
            self._next_processes = self._clock() + self._process_period_s
            self._processes = [self._list_processes(h) for h in self._handles]
        for i, handle in enumerate(self._handles):
            mem = self._query(lib.nvmlDeviceGetMemoryInfo, handle)
            util = self._query(lib.nvmlDeviceGetUtilizationRates, handle)
            temp = self._query(lib.nvmlDeviceGetTemperature, handle, getattr(lib, "NVML_TEMPERATURE_GPU", 0))
            power = self._query(lib.nvmlDeviceGetPowerUsage, handle)
            limit = self._query(lib.nvmlDeviceGetEnforcedPowerLimit, handle)
            gpus.append(
                GpuSample(
                    index=i,
                    name=self._names[i],
                    memory_used_mb=mem.used / MIB if mem is not None else None,
                    memory_total_mb=mem.total / MIB if mem is not None else None,
                    utilization=int(util.gpu) if util is not None else None,
                    temperature_c=int(temp) if temp is not None else None,
                    power_w=power / 1000 if power is not None else None,
                    power_limit_w=limit / 1000 if limit is not None else None,
                    uuid=self._uuids[i],
                    pci_bus_id=self._buses[i],
                    processes=self._processes[i],
                )
            )
        return NvmlSnapshot(time=now, gpus=tuple(gpus), driver=self.driver)

    def close(self) -> None:
        """Release NVML (safe to call when it never opened)."""
        if self._opened and not self.error and self._lib is not None:
            self._query(self._lib.nvmlShutdown)
        self._handles.clear()
