"""The machine check: measure the host (and the GPUs, where there are any), judge each figure,
fold the judgements into one verdict. The phase (`phases/machine.py`) and the command
(`pilot-tui machine`, through `__main__.py`) both call `run_check`."""

from __future__ import annotations

import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...analysis.checks import Check, verdict_of
from ...analysis.machine import gpus as judge_gpus
from ...analysis.machine import host as judge_host
from ...analysis.machine.host import DEFAULT_PREFETCH
from ...core.verdict import PASS
from . import cpu_speed, host
from .gpu import COPY_DEADLINE_S, GpuBoundary, GpuMeasurement, measure_gpus
from .host import Place

CPU_NOTE = "no peak to compare with on a CPU: recorded as measured, without a ratio"


@dataclass(frozen=True)
class MachineRequest:
    """What the run will ask of the machine, as far as the campaign says."""

    workers: int = 0
    prefetch: int = DEFAULT_PREFETCH
    ranks: int = 1
    batch_bytes: int | None = None
    batch_unknown: str = ""
    places: tuple[Place, ...] = ()
    precision: str = "fp32"
    probe_bytes: int = host.PROBE_BYTES
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The request as the check's own process takes it (paths as strings)."""
        out = asdict(self)
        out["places"] = [{**p, "path": str(p["path"])} for p in out["places"]]
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MachineRequest:
        places = tuple(
            Place(p["role"], Path(p["path"]), p.get("need_bytes"), p.get("what", "")) for p in data["places"]
        )
        fields = {k: v for k, v in data.items() if k not in ("places", "notes")}
        return cls(**fields, places=places, notes=tuple(data.get("notes", ())))


@dataclass
class MachineResult:
    verdict: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def default_places(checkpoints: Place) -> tuple[Place, ...]:
    """The checkpoint folder, the Hugging Face caches and the temporary folder."""
    caches = host.hf_caches()
    return (
        checkpoints,
        *(Place(role, path, None, "not known before the run") for role, path in caches.items()),
        Place("tmpdir", Path(tempfile.gettempdir()), None, "not known before the run"),
    )


def _gpu_details(m: GpuMeasurement) -> dict[str, Any]:
    out: dict[str, Any] = {"gpus": [asdict(f) for f in m.figures], "tf32": m.tf32}
    if m.pairs:
        out["pair_copies"] = [asdict(p) for p in m.pairs]
    if m.allreduce is not None:
        out["allreduce"] = asdict(m.allreduce)
    if m.notes:
        out["gpu_notes"] = list(m.notes)
    return out


def gpu_checks(m: GpuMeasurement, precision: str, deadline_s: float) -> list[Check]:
    checks = judge_gpus.gemm(m.figures, precision, m.tf32)
    checks += judge_gpus.memory(m.figures)
    checks += judge_gpus.copies(m.pairs, m.figures, deadline_s)
    if m.allreduce is not None:
        checks += judge_gpus.allreduce(m.allreduce, m.figures)
    checks += judge_gpus.health(m.figures)
    return checks


def run_check(request: MachineRequest, boundary: GpuBoundary | None = None) -> MachineResult:
    """Measure and judge; `boundary` None on a machine without a GPU (the host parts run alone)."""
    shm = host.shm_free_bytes()
    cores = host.available_cores()
    locations = host.measure_places(list(request.places), request.probe_bytes)
    checks = [
        judge_host.cores(cores, request.workers, request.ranks),
        judge_host.shared_memory(
            shm, request.workers, request.prefetch, request.batch_bytes, request.batch_unknown
        ),
        judge_host.disks(locations),
    ]
    details: dict[str, Any] = {
        "host": socket.gethostname(),
        "cores": cores,
        "loader_workers": request.workers,
        "prefetch_factor": request.prefetch,
        "ranks": request.ranks,
        "shm_free_bytes": shm,
        "largest_batch_bytes": request.batch_bytes,
        "locations": [
            {
                "role": loc.role,
                "path": loc.path,
                "free_gib": round(loc.free_bytes / 2**30, 3),
                "write_gbps": round(loc.write_gbps, 3) if loc.write_gbps is not None else None,
                "need_gib": round(loc.need_bytes / 2**30, 4) if loc.need_bytes is not None else None,
                "need": loc.need_what,
                "error": loc.error,
            }
            for loc in locations
        ],
    }
    if request.batch_bytes is None and request.batch_unknown:
        details["largest_batch_unknown"] = request.batch_unknown
    if boundary is None:
        details["cpu_gemm_gflops"] = round(cpu_speed.gemm_gflops(), 2)
        details["cpu_memory_gbps"] = round(cpu_speed.memory_gbps(), 2)
        details["cpu_note"] = CPU_NOTE
    else:
        m = measure_gpus(boundary, request.precision)
        details |= _gpu_details(m)
        checks += gpu_checks(m, request.precision, COPY_DEADLINE_S)
    details["checks"] = [c.as_dict() for c in checks]
    notes = [*request.notes, *(f"{loc.role}: {loc.error}" for loc in locations if loc.error)]
    if notes:
        details["notes"] = notes
    verdict, reason = verdict_of(checks)
    if verdict == PASS:
        reason = summary(details)
    return MachineResult(str(verdict), reason, details)


def summary(details: dict[str, Any]) -> str:
    """One line of what was measured, for a machine that passed."""
    parts = [f"{details['cores']} cores for {details['loader_workers']} loader workers"]
    shm = details.get("shm_free_bytes")
    if shm is not None:
        parts.append(f"/dev/shm {judge_host.size(shm)} free")
    # Places on one filesystem share its figures: said once, with every role that writes there.
    shared: dict[tuple[Any, Any], list[str]] = {}
    for loc in details["locations"]:
        shared.setdefault((loc["free_gib"], loc["write_gbps"]), []).append(loc["role"])
    for (free, speed), roles in shared.items():
        rate = f", write {speed:.3g} GB/s" if speed is not None else ""
        parts.append(f"{', '.join(roles)}: {free:.4g} GiB free{rate}")
    if "cpu_gemm_gflops" in details:
        parts.append(
            f"CPU GEMM {details['cpu_gemm_gflops']:.4g} GFLOP/s fp32, memory {details['cpu_memory_gbps']:.3g} GB/s "
            "(no peak to compare with on CPU)"
        )
    for g in details.get("gpus", []):
        if g.get("gemm_tflops") is not None:
            parts.append(f"GPU {g['index']} GEMM {g['gemm_tflops']:.4g} TFLOP/s")
    ar = details.get("allreduce")
    if ar and ar.get("busbw_gbps") is not None:
        parts.append(f"all-reduce bus {ar['busbw_gbps']:.4g} GB/s over {ar['link']}")
    return "; ".join(parts)
