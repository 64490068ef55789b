"""The machine check measured for real on this CPU machine; the GPU parts through doubles of the
one hardware boundary (`GpuBoundary`), everything above it as it runs on a GPU box."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from conftest import tmpfs

from pilot_tui.analysis.machine.references import pcie_gbps
from pilot_tui.commands.cli import main
from pilot_tui.core.verdict import FAIL, PASS, WARN
from pilot_tui.runner.machine import host
from pilot_tui.runner.machine.check import MachineRequest, run_check
from pilot_tui.runner.machine.gpu import GpuDevice, Health
from pilot_tui.runner.machine.host import Place

PROBE = 4 * 2**20  # small writes keep the tests fast; the figure is still a timed, fsynced write


def places(root: Path, need: int | None = None) -> tuple[Place, ...]:
    (root / "tmp").mkdir(exist_ok=True)
    return (
        Place("checkpoints", root / "ckpt", need, "declared by the test" if need else "not known"),
        Place("hf_datasets_cache", root / "hf" / "datasets", None, "not known"),
        Place("tmpdir", root / "tmp", None, "not known"),
    )


def test_the_machine_row_on_cpu_has_every_figure(tmp_path: Path) -> None:
    result = run_check(
        MachineRequest(workers=1, batch_bytes=2**20, places=places(tmp_path), probe_bytes=PROBE)
    )
    d = result.details
    assert result.verdict == PASS, result.reason
    assert [loc["role"] for loc in d["locations"]] == ["checkpoints", "hf_datasets_cache", "tmpdir"]
    for loc in d["locations"]:
        assert loc["free_gib"] > 0 and loc["write_gbps"] > 0, loc
    assert (
        d["shm_free_bytes"] == host.shm_free_bytes()
        or abs(d["shm_free_bytes"] - host.shm_free_bytes()) < 2**30
    )
    assert d["cpu_gemm_gflops"] > 0 and d["cpu_memory_gbps"] > 0
    assert "no peak to compare with" in d["cpu_note"] and not any("share" in k or "ratio" in k for k in d)
    # The probe files are gone: the check leaves nothing where the run writes.
    assert not list(tmp_path.rglob(".pilot-machine-*"))


def test_shm_smaller_than_the_loaders_need_warns_naming_the_numbers(tmp_path: Path) -> None:
    shm = host.shm_free_bytes()
    if shm is None:
        pytest.skip("no /dev/shm on this machine")
    batch = shm // 3 + 2**20  # 2 workers × prefetch 2 × batch > the shm measured now
    result = run_check(
        MachineRequest(workers=2, prefetch=2, batch_bytes=batch, places=places(tmp_path), probe_bytes=PROBE)
    )
    assert result.verdict == WARN
    assert "/dev/shm" in result.reason and "is smaller than the loader's need" in result.reason
    assert "2 workers × prefetch 2" in result.reason


def test_a_disk_too_small_fails_naming_the_location(tmp_path: Path) -> None:
    free = host.shutil.disk_usage(tmp_path).free
    result = run_check(MachineRequest(places=places(tmp_path, need=free + 2**30), probe_bytes=PROBE))
    assert result.verdict == FAIL
    assert f"checkpoints {tmp_path / 'ckpt'} fills first" in result.reason


def test_a_campaign_on_a_small_disk_records_a_failed_machine_row(tmp_path: Path, write_campaign) -> None:
    """The whole path: the phase reads the estimate's checkpoint size and the real free space."""
    small = tmp_path / "small"
    with tmpfs(small, "size=1m") as mounted:
        if not mounted:
            pytest.skip("cannot mount a small tmpfs here (not root)")
        skip = [
            "inspect",
            "split",
            "overfit",
            "load",
            "first_step",
            "steady",
            "eval_longest",
            "save",
            "export",
        ]
        skip += ["lr_run", "resume", "final", "fit_search"]
        campaign = write_campaign({"phases": {"skip": skip}, "plan": {"checkpoint_dir": "small"}})
        code = main(["run", str(campaign), "--headless", "--records", str(tmp_path / "records")])
    assert code == 1
    record = next((tmp_path / "records").glob("*.toml"))
    row = next(r for r in tomllib.loads(record.read_text())["phases"] if r["name"] == "machine")
    assert row["verdict"] == FAIL
    assert f"checkpoints {small} fills first" in row["reason"] and "from the estimate" in row["reason"]
    ckpt = row["details"]["locations"][0]
    assert ckpt["free_gib"] <= 0.001 and ckpt["error"]  # the probe itself did not fit: said, not hidden


def test_machine_command_prints_the_figures_and_refuses_bad_input(
    tmp_path: Path, write_campaign, capsys
) -> None:
    campaign = write_campaign({"batch": {"num_workers": 1}})
    assert main(["machine", str(campaign), "--records", str(tmp_path / "records")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine pass:")
    assert "checkpoints" in out and "GiB free, write" in out and "CPU GEMM fp32" in out
    assert "largest batch" in out and "1 loader workers" in out
    assert main(["machine", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.toml" in err


# ------------------------------------------------------------------ GPUs, through doubles


class Box:
    """A double of the hardware boundary: a box of GPUs with chosen speeds, links and faults."""

    def __init__(
        self, n: int, name: str = "NVIDIA H100 80GB HBM3", link: str = "nvlink", busbw: float = 400.0
    ):
        self.n, self.name, self._link, self.busbw = n, name, link, busbw
        self.tflops = {i: 780.0 for i in range(n)}
        self.zeros: set[tuple[int, int]] = set()

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(i, self.name, f"GPU-{i:08x}") for i in range(self.n)]

    def gemm_tflops(self, index: int, precision: str) -> float:
        return self.tflops[index]

    def memory_gbps(self, index: int) -> float:
        return 3000.0

    def copy_checksums(self, src: int, dst: int) -> tuple[int, int]:
        return 987654, 0 if (src, dst) in self.zeros else 987654

    def allreduce_busbw(self, indices: list[int]) -> float:
        return self.busbw

    def link(self, a: int, b: int) -> str:
        return self._link

    def pcie_link(self, index: int) -> tuple[int, int]:
        return 4, 16

    def health(self, index: int) -> Health:
        return Health()

    def tf32(self) -> bool:
        return False


def gpu_check(box: Box, tmp_path: Path):
    return run_check(MachineRequest(precision="bf16", places=places(tmp_path), probe_bytes=PROBE), box)


def test_one_gpu_20_percent_slow_among_8_is_named(tmp_path: Path) -> None:
    box = Box(8)
    box.tflops[5] = 624.0
    result = gpu_check(box, tmp_path)
    assert result.verdict == WARN
    assert f"GPU 5 (GPU-00000005) on {result.details['host']} is slow" in result.reason
    assert "20% below" in result.reason and "GPU 4 " not in result.reason
    assert len(result.details["pair_copies"]) == 8 * 7
    assert "cpu_gemm_gflops" not in result.details  # a GPU box is judged by its GPUs


def test_a_pair_copying_zeros_is_named(tmp_path: Path) -> None:
    box = Box(4)
    box.zeros.add((2, 3))
    result = gpu_check(box, tmp_path)
    assert result.verdict == FAIL
    assert "GPU 2 (GPU-00000002)" in result.reason and "→ GPU 3 (GPU-00000003)" in result.reason
    assert "copied zeros" in result.reason and result.reason.count("copied zeros") == 1


def test_a_pcie_box_is_compared_with_the_pcie_figure(tmp_path: Path) -> None:
    result = gpu_check(Box(4, name="NVIDIA L40S", link="pcie", busbw=21.0), tmp_path)
    assert result.verdict == PASS, result.reason
    [ar] = [c for c in result.details["checks"] if c["name"] == "allreduce"]
    assert f"pcie figure {pcie_gbps(4, 16):g} GB/s" in ar["message"] and "NVLink" not in ar["message"]
    assert result.details["allreduce"]["pairs_by_link"] == {"pcie": 6}


def test_a_copy_that_hangs_fails_by_its_deadline() -> None:
    import threading

    from pilot_tui.runner.machine.gpu import measure_gpus

    release = threading.Event()

    class Hangs(Box):
        def copy_checksums(self, src: int, dst: int) -> tuple[int, int]:
            if (src, dst) == (0, 1):
                release.wait(5)
            return super().copy_checksums(src, dst)

    try:
        m = measure_gpus(Hangs(2), "bf16", host="h", deadline_s=0.2)
    finally:
        release.set()
    [hung] = [p for p in m.pairs if p.received is None]
    assert (hung.src, hung.dst) == (0, 1)


def test_the_machine_command_says_it_is_measuring_while_it_measures(tmp_path, monkeypatch, capsys):
    # `pilot-tui machine` waits seconds on its check (torch's import, the timed disk write, the
    # CPU's figures): a log gets a line per period instead of silence, then the result.
    import argparse
    import io
    import json

    from pilot_tui.commands.machine import run_machine

    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    code = run_machine(argparse.Namespace(campaign=None, records=None, json=True), err=err, beat_s=0.2)
    said = [line for line in err.getvalue().splitlines() if line]
    assert code in (0, 1) and said, err.getvalue()
    assert all(
        line.startswith("… measuring this machine: its disks, then its CPU or every GPU (") for line in said
    )
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] in ("pass", "warn", "fail")
    # Without a campaign there is no batch to weigh /dev/shm against, and the report says why.
    from pilot_tui.commands.machine import report_lines

    assert "largest batch not known (no campaign to read it from)" in "\n".join(report_lines(result))
