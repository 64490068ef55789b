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


def test_process_lists_are_polled_rarely_and_gpus_carry_their_uuid() -> None:
    from .fake_nvml import UuidNvml

    now = [0.0]
    lib = UuidNvml()
    probe = NvmlProbe(lib, clock=lambda: now[0], process_period_s=5.0)
    first = probe.sample()
    assert [g.uuid for g in first.gpus] == list(UuidNvml.UUIDS)
    assert first.gpus[1].pci_bus_id == "00000000:1A:00.0"
    assert all(g.processes is None for g in first.gpus)  # opening stays instant
    now[0] = 4.9
    probe.sample()
    assert not [c for c in lib.calls if "Process" in c]
    now[0] = 5.0
    listed = probe.sample()
    assert [p.pid for p in listed.gpus[1].processes] == [90001, 90002]  # largest first
    assert listed.gpus[0].processes[0].used_mb == 20 * 1024
    calls = lib.calls.count("nvmlDeviceGetComputeRunningProcesses")
    now[0] = 7.0
    again = probe.sample()
    assert lib.calls.count("nvmlDeviceGetComputeRunningProcesses") == calls  # cached in between
    assert again.gpus[1].processes == listed.gpus[1].processes


def test_the_campaign_gpu_is_found_by_uuid_and_the_runner_by_memory() -> None:
    from pilot_tui.tui.nvml import campaign_gpus, match_runner
    from pilot_tui.tui.panes.counters import gpu_table, process_table

    from .fake_nvml import UuidNvml

    probe = NvmlProbe(UuidNvml(), clock=lambda: 10.0, process_period_s=0.0)
    gpus = probe.sample().gpus
    # CUDA_VISIBLE_DEVICES=1: the runner's cuda:0 is NVML's GPU 1, found by its UUID.
    env = {"device": "cuda:0", "devices": [{"index": 0, "uuid": UuidNvml.UUIDS[1]}]}
    campaign = campaign_gpus(env)
    assert campaign == {UuidNvml.UUIDS[1]: "cuda:0"}
    assert campaign_gpus({"device": "cpu", "devices": []}) == {}
    # Host pids (a container): not the runner's pid, so the match is by memory, on its GPU only.
    assert match_runner(gpus[1].processes, reserved_mb=700.0, pid=12) == 90001
    assert match_runner(gpus[1].processes, reserved_mb=5000.0) is None  # nothing that large
    assert match_runner(gpus[1].processes, reserved_mb=None, pid=90002) == 90002
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(gpu_table(gpus, campaign))
    console.print(process_table(gpus, campaign, 700.0))
    text = console.export_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert any(ln.lstrip().startswith("▶ 1 H100") and "= cuda:0" in ln for ln in lines), text
    assert not any(ln.lstrip().startswith("▶ 0") for ln in lines), text
    runner_lines = [ln for ln in lines if "the runner" in ln]
    assert len(runner_lines) == 1 and "90001" in runner_lines[0], text
