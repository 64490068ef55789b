"""The machine check, measured: the host (cores, `/dev/shm`, every place the run writes), the CPU's
GEMM and memory bandwidth, and the GPUs through one boundary (`gpu.GpuBoundary`, implemented for
real by `cuda.CudaNvml`). The judging is pure and lives in `analysis/machine/`."""
