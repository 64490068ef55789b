"""A fake NVML library: the only test double in the TUI tests, at the hardware boundary.

It has the shape of the `pynvml` module (nvidia-ml-py) for the calls `NvmlProbe` makes, with fixed
figures, so the Counters pane can be tested and snapshotted on a machine without a GPU.
"""

from __future__ import annotations

from types import SimpleNamespace

GIB = 1024**3


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class FakeNvml:
    """Two fixed GPUs; `broken` names calls that raise, as a device without that sensor does."""

    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def __init__(self, broken: tuple[str, ...] = ()) -> None:
        self.broken = set(broken)
        self.calls: list[str] = []
        self.gpus = [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "used": 21 * GIB,
                "total": 80 * GIB,
                "util": 87,
                "temp": 64,
                "power": 412_000,
                "limit": 700_000,
            },
            {
                "name": "NVIDIA H100 80GB HBM3",
                "used": 1 * GIB,
                "total": 80 * GIB,
                "util": 0,
                "temp": 31,
                "power": 71_000,
                "limit": 700_000,
            },
        ]

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.broken:
            raise NVMLError(f"{name}: Not Supported")

    def nvmlInit(self) -> None:
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._call("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        self._call("nvmlDeviceGetName")
        return self.gpus[h]["name"]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetMemoryInfo")
        g = self.gpus[h]
        return SimpleNamespace(used=g["used"], total=g["total"], free=g["total"] - g["used"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=self.gpus[h]["util"], memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return self.gpus[h]["temp"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return self.gpus[h]["power"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return self.gpus[h]["limit"]


class NoDriverNvml(FakeNvml):
    """A machine without the NVIDIA driver: init fails the way pynvml does there."""

    def nvmlInit(self) -> None:
        raise NVMLError_LibraryNotFound()


class UuidNvml(FakeNvml):
    """FakeNvml with UUIDs, PCI bus ids and process lists: a machine where the runner's `cuda:0`
    (CUDA_VISIBLE_DEVICES=1) is NVML's GPU 1, and NVML reports host pids (a container)."""

    UUIDS = ("GPU-11111111-aaaa", "GPU-22222222-bbbb")

    def __init__(self, broken: tuple[str, ...] = ()) -> None:
        super().__init__(broken)
        self.processes = {
            0: [SimpleNamespace(pid=4242, usedGpuMemory=20 * GIB)],
            # The runner (reserve 700 MiB + its CUDA context) and another job's small process.
            1: [
                SimpleNamespace(pid=90001, usedGpuMemory=1100 * 1024**2),
                SimpleNamespace(pid=90002, usedGpuMemory=300 * 1024**2),
            ],
        }

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._call("nvmlDeviceGetUUID")
        return self.UUIDS[h]

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x19 + h:02X}:00.0")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return self.processes[h]
