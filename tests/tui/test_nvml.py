"""NvmlProbe: figures from NVML, fail-soft per counter, one clear line when there is no driver."""

from __future__ import annotations

from pilot_tui.tui.nvml import NvmlProbe

from .fake_nvml import FakeNvml, NoDriverNvml


def test_samples_every_gpu_in_user_units() -> None:
    probe = NvmlProbe(FakeNvml())
    assert probe.open() == ""
    snap = probe.sample()
    assert snap.error == "" and snap.driver == "550.54.15"
    assert [g.index for g in snap.gpus] == [0, 1]
    g = snap.gpus[0]
    assert (g.memory_used_mb, g.memory_total_mb) == (21 * 1024, 80 * 1024)
    assert (g.utilization, g.temperature_c, g.power_w, g.power_limit_w) == (87, 64, 412.0, 700.0)


def test_one_failing_counter_leaves_the_others() -> None:
    probe = NvmlProbe(FakeNvml(broken=("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature")))
    g = probe.sample().gpus[1]
    assert g.power_w is None and g.temperature_c is None  # "n/a", never a made-up zero
    assert g.memory_used_mb == 1024 and g.utilization == 0


def test_no_driver_says_why_and_never_raises() -> None:
    probe = NvmlProbe(NoDriverNvml())
    snap = probe.sample()
    assert snap.gpus == () and snap.error.startswith("NVML: driver not found")
    probe.close()


def test_fast_poll_never_lists_processes() -> None:
    lib = FakeNvml()
    probe = NvmlProbe(lib)
    for _ in range(3):
        probe.sample()
    assert not [c for c in lib.calls if "Process" in c]
    assert lib.calls.count("nvmlInit") == 1  # opened once, not per sample


def test_the_real_library_answers_here() -> None:
    # On this machine: either real GPUs or a one-line reason, never an exception.
    snap = NvmlProbe().sample()
    assert bool(snap.gpus) != bool(snap.error)
