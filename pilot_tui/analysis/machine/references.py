"""What a healthy GPU and link reach, from their datasheets: the figures the machine check judges
against (pure, no torch).

Every compute figure is the **dense** one. NVIDIA's datasheets print tensor-core figures "with
sparsity" (2:4 structured sparsity, which no ordinary training step uses) beside or instead of the
dense ones; those are exactly twice the dense figure and are never used here. Sources are named
per entry, and listed in docs/machine.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/"
H200_SOURCE = "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/"
A100_SOURCE = (
    "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
L40S_SOURCE = "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/"
L40_SOURCE = "NVIDIA L40 datasheet, https://www.nvidia.com/en-us/data-center/l40/"
L4_SOURCE = "NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/"
A10_SOURCE = "NVIDIA A10 datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
ADA_SOURCE = (
    "NVIDIA Ada GPU Architecture whitepaper, appendix table (RTX 4090, FP32 accumulate), "
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
GA102_SOURCE = (
    "NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3090, FP32 accumulate), "
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
V100_SOURCE = "NVIDIA V100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/v100/"
PCIE_SOURCE = (
    "PCI-SIG base specifications: 8 / 16 / 32 GT/s per lane with 128b/130b encoding "
    "(gen 3 / 4 / 5), one direction"
)


@dataclass(frozen=True)
class GpuReference:
    """One GPU model's dense peaks (TFLOP/s), memory bandwidth and NVLink bandwidth (GB/s, one
    direction per GPU: half the datasheet's bidirectional figure); None where it has none."""

    model: str
    pattern: str  # matched against the CUDA / NVML device name, case-insensitive
    bf16: float | None
    fp16: float | None
    tf32: float | None
    fp32: float
    memory_gbps: float
    nvlink_gbps: float | None
    source: str

    def peak_tflops(self, precision: str, tf32: bool = False) -> tuple[float | None, str]:
        """The dense peak for a GEMM in `precision` and which column it is (fp32 GEMMs run on
        TF32 tensor cores when torch allows it: then the TF32 peak is the one to reach)."""
        if precision == "bf16":
            return self.bf16, "bf16 dense tensor"
        if precision == "fp16":
            return self.fp16, "fp16 dense tensor"
        if tf32 and self.tf32 is not None:
            return self.tf32, "tf32 dense tensor"
        return self.fp32, "fp32 (no tensor core)"


# Ordered: the first pattern that matches wins, so the narrower names come first.
GPU_REFERENCES: tuple[GpuReference, ...] = (
    GpuReference("H200 NVL", r"H200 NVL", 835, 835, 417, 60, 4800, 450, H200_SOURCE),
    GpuReference("H200 SXM", r"H200", 989, 989, 494, 67, 4800, 450, H200_SOURCE),
    GpuReference("H100 NVL", r"H100 NVL", 835, 835, 417, 60, 3900, 300, H100_SOURCE),
    GpuReference("H100 PCIe", r"H100 PCIe", 756, 756, 378, 51, 2000, 300, H100_SOURCE),
    GpuReference("H100 SXM", r"H100", 989, 989, 494, 67, 3350, 450, H100_SOURCE),
    GpuReference("A100 80GB PCIe", r"A100 80GB PCIe", 312, 312, 156, 19.5, 1935, 300, A100_SOURCE),
    GpuReference("A100 80GB SXM", r"A100.*80GB", 312, 312, 156, 19.5, 2039, 300, A100_SOURCE),
    GpuReference("A100 40GB", r"A100", 312, 312, 156, 19.5, 1555, 300, A100_SOURCE),
    GpuReference("L40S", r"L40S", 362, 362, 183, 91.6, 864, None, L40S_SOURCE),
    GpuReference("L40", r"L40\b", 181, 181, 90.5, 90.5, 864, None, L40_SOURCE),
    GpuReference("L4", r"\bL4\b", 121, 121, 60, 30.3, 300, None, L4_SOURCE),
    GpuReference("A10", r"\bA10\b", 125, 125, 62.5, 31.2, 600, None, A10_SOURCE),
    GpuReference("RTX 4090", r"RTX 4090", 165, 165, 82.6, 82.6, 1008, None, ADA_SOURCE),
    GpuReference("RTX 3090", r"RTX 3090", 71, 71, 35.6, 35.6, 936, None, GA102_SOURCE),
    # No bf16 tensor cores before Ampere: a bf16 GEMM there is emulated, with no peak to reach.
    GpuReference("V100", r"V100", None, 125, None, 15.7, 900, 150, V100_SOURCE),
)


def gpu_reference(name: str) -> GpuReference | None:
    """The reference for a device name as CUDA or NVML spells it, or None for an unknown GPU."""
    for ref in GPU_REFERENCES:
        if re.search(ref.pattern, name, re.IGNORECASE):
            return ref
    return None


# GB/s per lane, one direction: the raw rate after line encoding (8b/10b before gen 3).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# Link classes, fastest first; a ring is as fast as its slowest hop.
NVLINK, PCIE, SYS = "nvlink", "pcie", "sys"
LINK_ORDER = (NVLINK, PCIE, SYS)
LINK_LABELS = {
    NVLINK: "NVLink",
    PCIE: "PCIe (through PCIe switches or one CPU's host bridges)",
    SYS: "SYS (crossing the link between CPU sockets)",
}


def pcie_gbps(generation: int, width: int) -> float | None:
    """One direction of a PCIe link of this generation and lane count, or None if unknown."""
    lane = PCIE_LANE_GBPS.get(generation)
    return round(lane * width, 2) if lane and width > 0 else None


@dataclass(frozen=True)
class LinkExpectation:
    """The all-reduce bus bandwidth a link class should reach, and where the figure comes from."""

    link: str
    gbps: float | None
    source: str


def expected_busbw(link: str, nvlink_gbps: float | None, pcie_link_gbps: float | None) -> LinkExpectation:
    """The figure an all-reduce's bus bandwidth is compared with, for the topology NVML reports.

    Bus bandwidth (nccl-tests' PERFORMANCE.md) is comparable with one direction of the slowest
    link a ring crosses: NVLink's per-GPU figure on an NVLink box, the GPUs' PCIe link on a PCIe
    box. A ring crossing the socket link (SYS) cannot beat the PCIe link either, and commonly
    falls far below it (nccl-tests #178: 208 → 20 GB/s): it is compared with the PCIe figure
    too, so the shortfall shows.
    """
    if link == NVLINK:
        return LinkExpectation(link, nvlink_gbps, "NVLink per GPU, one direction (datasheet)")
    return LinkExpectation(link, pcie_link_gbps, f"PCIe link of the GPUs, one direction ({PCIE_SOURCE})")
