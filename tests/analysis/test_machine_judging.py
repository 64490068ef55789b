"""The machine check's judging, on figures handed in (pure: no torch, no runner)."""

from __future__ import annotations

from pilot_tui.analysis.machine import gpus, host
from pilot_tui.analysis.machine.gpus import AllReduce, GpuFigure, PairCopy
from pilot_tui.analysis.machine.references import gpu_reference, pcie_gbps
from pilot_tui.core.verdict import FAIL, PASS, WARN

GIB, MIB = 2**30, 2**20


def eight(tflops: list[float], name: str = "NVIDIA H100 80GB HBM3") -> list[GpuFigure]:
    return [GpuFigure(i, name, f"GPU-{i:04d}", "node-a", gemm_tflops=t) for i, t in enumerate(tflops)]


def test_the_dense_peak_never_the_sparse_one() -> None:
    assert gpu_reference("NVIDIA H100 80GB HBM3").peak_tflops("bf16")[0] == 989
    assert gpu_reference("NVIDIA H200").peak_tflops("bf16")[0] == 989
    assert gpu_reference("NVIDIA A100-SXM4-80GB").peak_tflops("bf16")[0] == 312
    assert gpu_reference("NVIDIA GeForce RTX 4090").peak_tflops("bf16")[0] == 165
    assert gpu_reference("NVIDIA L40S").model == "L40S" and gpu_reference("NVIDIA L4").model == "L4"
    assert gpu_reference("NVIDIA H100 PCIe").model == "H100 PCIe"
    assert gpu_reference("Some New Card") is None


def test_a_gpu_20_percent_slow_among_8_is_named() -> None:
    checks = gpus.gemm(eight([780, 781, 779, 780, 624, 782, 780, 781]), "bf16")
    slow = [c for c in checks if c.name == "outlier"]
    assert len(slow) == 1 and slow[0].verdict == WARN
    assert "GPU 4 (GPU-0004) on node-a" in slow[0].message and "20% below" in slow[0].message
    # Every GPU is still compared with the dense peak it should reach, by name.
    assert all("989" in c.message for c in checks if c.name == "gemm")


def test_gpus_within_10_percent_of_each_other_name_nobody() -> None:
    assert not [
        c for c in gpus.gemm(eight([780, 760, 790, 771, 781, 775, 770, 785]), "bf16") if c.name == "outlier"
    ]


def test_a_gpu_far_below_its_datasheet_warns() -> None:
    [check] = gpus.gemm(eight([300])[:1], "bf16")
    assert check.verdict == WARN and "30% of the H100 SXM" in check.message


def test_a_pair_copying_zeros_is_named() -> None:
    figures = eight([780] * 2)
    pairs = [PairCopy(0, 1, sent=123456, received=123456), PairCopy(1, 0, sent=123456, received=0)]
    [check] = gpus.copies(pairs, figures, 10)
    assert check.verdict == FAIL
    assert "GPU 1 (GPU-0001) on node-a → GPU 0 (GPU-0000) on node-a copied zeros" in check.message
    assert "GPU 0 (GPU-0000) on node-a → GPU 1" not in check.message


def test_a_hung_or_wrong_copy_fails() -> None:
    pairs = [PairCopy(0, 1, 5, None), PairCopy(1, 0, 5, 7)]
    [check] = gpus.copies(pairs, eight([1, 1]), 10)
    assert (
        check.verdict == FAIL
        and "did not finish within 10 s" in check.message
        and "wrong data" in check.message
    )


def test_a_pcie_box_is_compared_with_the_pcie_figure_not_nvlink() -> None:
    figures = eight([700] * 4, name="NVIDIA H100 PCIe")
    result = AllReduce(gpus=4, busbw_gbps=20.0, link="pcie", pcie_generation=4, pcie_width=16)
    [check] = gpus.allreduce(result, figures)
    assert check.verdict == PASS, check.message
    assert f"pcie figure {pcie_gbps(4, 16):g} GB/s" in check.message and "NVLink per GPU" not in check.message
    # The same 20 GB/s over NVLink is far below what NVLink does.
    [nv] = gpus.allreduce(AllReduce(4, 20.0, "nvlink", 4, 16), figures)
    assert nv.verdict == WARN and "nvlink figure 300" in nv.message


def test_a_ring_crossing_sys_is_said() -> None:
    result = AllReduce(8, 9.0, "sys", 4, 16, pairs_by_link={"pcie": 12, "sys": 16})
    [check] = gpus.allreduce(result, eight([700] * 8, name="NVIDIA L40S"))
    assert check.verdict == WARN and "SYS" in check.message and "16 sys" in check.message


def test_throttle_and_ecc_warn() -> None:
    f = GpuFigure(
        2, "NVIDIA H100 80GB HBM3", "GPU-2", "h", throttle=("sw_power_cap", "hw_slowdown"), ecc_uncorrected=3
    )
    [check] = gpus.health([f])
    assert check.verdict == WARN and "hw_slowdown" in check.message and "sw_power_cap" not in check.message
    assert "3 uncorrected ECC" in check.message
    assert gpus.health([GpuFigure(0, "x", throttle=("gpu_idle",))]) == []


def test_shm_smaller_than_the_loader_needs_warns_with_the_numbers() -> None:
    check = host.shared_memory(64 * MIB, workers=4, prefetch=2, batch_bytes=12 * MIB)
    assert check.verdict == WARN
    assert (
        "/dev/shm 64 MiB is smaller" in check.message and "4 workers × prefetch 2 × 12 MiB" in check.message
    )
    assert "96 MiB" in check.message
    assert host.shared_memory(128 * MIB, 4, 2, 12 * MIB).verdict == PASS


def test_shm_not_judged_without_a_batch_size_says_why() -> None:
    check = host.shared_memory(64 * MIB, 4, 2, None, "the task did not load")
    assert (
        check.verdict == PASS and "not judged" in check.message and "the task did not load" in check.message
    )


def test_a_disk_too_small_fails_naming_the_location_that_fills_first() -> None:
    locations = [
        host.Location("checkpoints", "/data/ckpt", 1, 500 * GIB, 1.0, 40 * GIB, "4 × 10 GiB"),
        host.Location(
            "hf_datasets_cache", "/root/.cache/huggingface/datasets", 2, 20 * GIB, 1.0, 15 * GIB, "tokens"
        ),
        host.Location("tmpdir", "/tmp", 2, 20 * GIB, 1.0, 8 * GIB, "shards"),
    ]
    check = host.disks(locations)
    assert check.verdict == FAIL
    assert check.message.startswith(
        "disk too small: hf_datasets_cache /root/.cache/huggingface/datasets fills first"
    )
    assert (
        "23 GiB to write" in check.message
        and "20 GiB free" in check.message
        and "/data/ckpt" not in check.message
    )


def test_a_disk_nearly_full_warns_and_roomy_passes() -> None:
    near = host.Location("checkpoints", "/c", 1, 10 * GIB, 1.0, 9 * GIB, "3 × 3 GiB")
    assert host.disks([near]).verdict == WARN
    roomy = host.Location("checkpoints", "/c", 1, 100 * GIB, 1.0, 9 * GIB, "3 × 3 GiB")
    assert host.disks([roomy]).verdict == PASS


def test_cores_short_of_the_workers_warn() -> None:
    assert host.cores(8, workers=8, ranks=2).verdict == WARN
    assert "18 busy processes" in host.cores(8, 8, 2).message
    assert host.cores(32, 8, 2).verdict == PASS
