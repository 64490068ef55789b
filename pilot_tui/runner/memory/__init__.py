"""Memory, measured and estimated: the allocator and RSS probes of every row, NVML's view, what
an out-of-memory or a full disk looks like, a fit-search point judged, the fake-tensor estimate."""
