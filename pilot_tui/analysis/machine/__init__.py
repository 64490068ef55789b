"""The machine check's judging: measured figures of the host and the GPUs against what the run
needs and what the datasheets promise (pure, no torch; the runner measures, `runner/machine/`)."""

from .gpus import AllReduce, GpuFigure, PairCopy
from .host import Location
from .references import GPU_REFERENCES, GpuReference, gpu_reference

__all__ = [
    "GPU_REFERENCES",
    "AllReduce",
    "GpuFigure",
    "GpuReference",
    "Location",
    "PairCopy",
    "gpu_reference",
]
