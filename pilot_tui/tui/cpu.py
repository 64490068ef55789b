"""The CPU view of the runner: its CPU %, its RSS and the system memory, read through psutil.

Without a GPU the Counters pane shows these beside the runner's own RSS counter. Every read fails
soft (a runner that just exited, a /proc that cannot be read): the field is None, shown as n/a.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

MIB = 1024 * 1024


@dataclass(frozen=True)
class CpuSample:
    """One reading; None where it could not be read."""

    pid: int | None = None
    cpu_percent: float | None = None  # of one core: 200 % = two cores busy
    rss_mb: float | None = None
    threads: int | None = None
    system_used_mb: float | None = None
    system_total_mb: float | None = None
    load_avg_1m: float | None = None
    cores: int = 0


class CpuProbe:
    """Keeps the psutil.Process of the current runner, so its CPU % is measured between reads."""

    def __init__(self) -> None:
        self._proc: psutil.Process | None = None

    def sample(self, pid: int | None) -> CpuSample:
        cpu = rss = threads = None
        if pid is not None:
            try:
                if self._proc is None or self._proc.pid != pid:
                    self._proc = psutil.Process(pid)
                    self._proc.cpu_percent(None)  # the first call only starts the interval
                with self._proc.oneshot():
                    cpu = self._proc.cpu_percent(None)
                    rss = self._proc.memory_info().rss / MIB
                    threads = self._proc.num_threads()
            except (psutil.Error, OSError):
                self._proc = None
        try:
            vm = psutil.virtual_memory()
            used, total = (vm.total - vm.available) / MIB, vm.total / MIB
        except (psutil.Error, OSError):
            used = total = None
        try:
            load = psutil.getloadavg()[0]
        except (AttributeError, OSError):
            load = None
        return CpuSample(pid, cpu, rss, threads, used, total, load, psutil.cpu_count() or 0)
