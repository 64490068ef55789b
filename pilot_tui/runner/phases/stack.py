"""`stack`: the software stack, checked for real before any configuration is kept (R18).

A "PyTorch" line in a rental offer promises nothing about the CUDA build, bf16, the attention
kernels or the extensions the task imports. This phase runs first so a campaign fails fast: it
imports every declared extension, runs a tiny op in every precision the campaign uses and tries
each scaled-dot-product attention backend, and records what it saw, not what it assumes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import warnings
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ...core.dimensions import OPTIMIZERS
from ...core.reasons import exception_line, first_line
from ...core.verdict import FAIL, PASS, WARN
from ..context import RunContext
from ..distributed.group import GroupFailure
from ..distributed.launcher import backend, measure_interconnect, world_size
from ..environment import gpus
from ..loop import optimizers
from ..timing.speed_reference import reference_s
from .base import Outcome, PhaseRun, phase

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Kernels that exist only in CUDA builds: on CPU they are "not applicable", not "broken".
_CUDA_ONLY_BACKENDS = ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
_BACKEND_NAMES = {
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "memory_efficient",
    "CUDNN_ATTENTION": "cudnn",
    "MATH": "math",
}


def module_version(module: Any, name: str) -> str:
    """The module's `__version__`, else the version of the distribution that ships it."""
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and version:
        return version
    top = name.split(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def check_extension(name: str) -> dict[str, Any]:
    """Import one declared module for real; a binary extension can fail with more than ImportError."""
    try:
        module = importlib.import_module(name)
    except BaseException as exc:  # OSError (missing .so), RuntimeError (ABI), even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"name": name, "ok": False, "version": "", "error": exception_line(exc, 300)}
    return {"name": name, "ok": True, "version": module_version(module, name), "error": ""}


def check_precision(device: torch.device, precision: str) -> dict[str, Any]:
    """Run a forward and backward under the precision's autocast on the device; report what happened."""
    out: dict[str, Any] = {"precision": precision, "ok": True, "error": ""}
    if precision == "bf16" and device.type == "cuda":
        # Without native bf16 (before compute capability 8.0) torch may emulate it slowly: not support.
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch without the argument
            native = torch.cuda.is_bf16_supported()
        if not native:
            return out | {"ok": False, "error": "this GPU has no native bf16 support"}
    try:
        layer = torch.nn.Linear(8, 8).to(device)
        x = torch.randn(4, 8, device=device)
        if precision == "fp32":
            y = layer(x)
        else:
            with torch.autocast(device_type=device.type, dtype=_DTYPES[precision]):
                y = layer(x)
            if y.dtype != _DTYPES[precision]:
                return out | {"ok": False, "error": f"autocast produced {y.dtype}, not {_DTYPES[precision]}"}
        y.float().sum().backward()
        if not torch.isfinite(layer.weight.grad).all():
            return out | {"ok": False, "error": "non-finite gradient in the probe"}
    except Exception as exc:
        return out | {"ok": False, "error": exception_line(exc, 300)}
    return out


def check_attention(device: torch.device, precision: str) -> list[dict[str, Any]]:
    """Try every scaled-dot-product attention backend on a tiny causal call, in the campaign's dtype."""
    dtype = _DTYPES.get(precision, torch.float32)
    q = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)
    results = []
    for key, label in _BACKEND_NAMES.items():
        backend = SDPBackend.__members__.get(key)
        if backend is None:
            results.append({"backend": label, "status": "absent", "detail": "this torch has no such backend"})
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                status, detail = "usable", ""
            except Exception as exc:
                # torch explains *why* a kernel was refused in warnings; keep the first one.
                why = [line for w in caught if (line := first_line(str(w.message)))]
                detail = why[0][:300] if why else exception_line(exc, 300)
                if device.type != "cuda" and key in _CUDA_ONLY_BACKENDS:
                    status, detail = "not_applicable", "CUDA-only kernel; this pilot runs on CPU"
                else:
                    status = "not_usable"
        results.append({"backend": label, "status": status, "detail": detail})
    return results


def check_nccl() -> dict[str, Any]:
    """Is the collective backend for multi-GPU data parallelism in this build?"""
    dist = torch.distributed.is_available()
    nccl = bool(dist and torch.distributed.is_nccl_available())
    version = ""
    if nccl and torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            version = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:
            version = ""
    gloo = bool(dist and torch.distributed.is_gloo_available())
    return {"distributed": dist, "nccl": nccl, "nccl_version": version, "gloo": gloo}


def allreduce_size_mb(ctx: RunContext) -> float:
    """The declared all-reduce size, else 64 MiB on GPUs (nccl-tests' bandwidth plateau) and 8 on CPU."""
    return ctx.spec.distributed.allreduce_mb or (64.0 if ctx.device.type == "cuda" else 8.0)


def check_interconnect(ctx: RunContext, details: dict[str, Any]) -> list[str]:
    """With more than one rank planned: start the process group for real and all-reduce on it (R22)."""

    if ctx.spec.distributed.strategy == "none" or world_size(ctx) < 2:
        return []
    try:
        details["interconnect"] = measure_interconnect(ctx, allreduce_size_mb(ctx))
    except GroupFailure as exc:
        details["interconnect"] = {"error": exc.reason} | exc.details
        return [f"the {backend(ctx)} process group of {world_size(ctx)} ranks failed: {exc.reason}"]
    return []


def campaign_precisions(ctx: RunContext) -> dict[str, list[str]]:
    """precision -> the configurations (control and variants) that use it."""
    used: dict[str, list[str]] = {ctx.spec.batch.precision: ["control"]}
    for v in ctx.spec.variants:
        if v.get("precision"):
            used.setdefault(v.get("precision"), []).append(v.id)
    return used


def campaign_optimizers(ctx: RunContext) -> dict[str, list[str]]:
    """optimizer -> the configurations (control and variants) that use it."""
    used: dict[str, list[str]] = {ctx.spec.optim.name: ["control"]}
    for v in ctx.spec.variants:
        if v.get("optimizer"):
            used.setdefault(v.get("optimizer"), []).append(v.id)
    return used


def check_optimizers(ctx: RunContext, failures: list[str], warns: list[str]) -> list[dict[str, Any]]:
    """Every optimizer of the table, built and stepped on the device (the used ones decide).

    One the installed torch lacks fails its configurations; a fused kernel the device lacks
    falls back to its unfused twin (the configuration's row says so): a warning.
    """
    used = campaign_optimizers(ctx)
    results = []
    for name in OPTIMIZERS:
        result = optimizers.probe(name, ctx.device) | {"used_by": used.get(name, [])}
        results.append(result)
        if result["ok"] or not result["used_by"]:
            continue
        who = (
            "declared optimizer"
            if "control" in result["used_by"]
            else f"variant(s) {', '.join(result['used_by'])}:"
        )
        fallback = optimizers.FALLBACK.get(name)
        if fallback:
            warns.append(
                f"{who} {name} does not run on {ctx.device.type}: runs as {fallback} ({result['error']})"
            )
        elif "control" in result["used_by"]:
            failures.append(f"{who} {name} does not run here ({result['error']})")
        else:
            warns.append(f"{who} {name} does not run here ({result['error']})")
    return results


@phase("stack")
def stack(ctx: RunContext, run: PhaseRun) -> Outcome:
    device = ctx.device
    # The machine's speed at the pilot's start, by the fixed workload steady times around its
    # loop: the plan's range spans the speeds the whole pilot saw (analysis/step_time.py).
    speed = reference_s()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    used = campaign_precisions(ctx)
    # Every precision is tried, used or not: a variant made later (the TUI's `v`) can then be
    # kept by the plan without another stack run. Only the used ones decide the verdict.
    precisions = [check_precision(device, p) | {"used_by": used.get(p, [])} for p in _DTYPES]
    bf16 = next(p["ok"] for p in precisions if p["precision"] == "bf16")
    extensions = [check_extension(name) for name in ctx.spec.task.requires]
    attention = check_attention(device, ctx.spec.batch.precision)
    nccl = check_nccl()
    details: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "cudnn": str(cudnn) if cudnn else "",
        "device": str(device),
        "gpus": gpus(),
        "bf16": bool(bf16),
        "precisions": precisions,
        "attention": attention,
        "nccl": nccl,
        "extensions": extensions,
        "speed_reference_s": [speed],
    }
    failures, warns = [], []
    for ext in extensions:
        if not ext["ok"]:
            failures.append(f"extension {ext['name']} does not import ({ext['error']})")
    for p in precisions:
        if p["ok"] or not p["used_by"]:
            continue
        what = f"{p['precision']} is not supported here ({p['error']})"
        if "control" in p["used_by"]:
            failures.append(f"declared precision {what}")
        else:
            warns.append(f"variant(s) {', '.join(p['used_by'])}: {what}")
    multi = ctx.spec.batch.replicas > 1 or ctx.spec.plan.gpus > 1
    if multi and device.type == "cuda" and not nccl["nccl"]:
        failures.append("several GPUs are planned but this torch build has no NCCL")
    if not any(a["status"] == "usable" for a in attention):
        warns.append("no scaled-dot-product attention backend ran")
    details["optimizers"] = check_optimizers(ctx, failures, warns)
    task_probe(ctx, details, failures)
    failures += check_interconnect(ctx, details)
    details["failures"] = failures
    details["warnings"] = warns
    if failures:
        return Outcome(FAIL, "; ".join(failures), details)
    if warns:
        return Outcome(WARN, "; ".join(warns), details)
    usable = [a["backend"] for a in attention if a["status"] == "usable"]
    n_ext = len(extensions)
    optims = list(campaign_optimizers(ctx))
    runs = f"optimizer {optims[0]} runs" if len(optims) == 1 else f"optimizers {', '.join(optims)} run"
    reason = (
        f"torch {torch.__version__} on {device}; {', '.join(used)} supported; {runs}; attention: "
        f"{', '.join(usable)}; {n_ext} extension{'s' if n_ext != 1 else ''} imported"
    )
    if "interconnect" in details:
        ic = details["interconnect"]
        reason += (
            f"; all-reduce {ic['size_mb']:g} MiB on {ic['ranks']} ranks ({ic['backend']}): "
            f"bus {ic['busbw_gbps']:.3g} GB/s, latency {ic['latency_us']:.0f} µs"
        )
        if "nodes" in ic:
            reason += "; " + node_links(ic)
    return Outcome(PASS, reason, details)


def node_links(ic: dict[str, Any]) -> str:
    """Within a node and across nodes, separately: the second is the one that breaks plans."""
    parts = []
    for link, label in (("within_node", "within a node"), ("across_nodes", "across nodes")):
        m = ic.get(link, {})
        if "busbw_gbps" in m:
            parts.append(
                f"{label} bus {m['busbw_gbps']:.3g} GB/s ({m['ranks']} ranks, {m['latency_us']:.0f} µs)"
            )
        else:
            parts.append(f"{label}: {m.get('note', 'not measured')}")
    where = "loopback: every node on this host" if ic.get("loopback") else f"{ic['nodes']} nodes"
    return f"{'; '.join(parts)} [{where}]"


def task_probe(ctx: RunContext, details: dict[str, Any], failures: list[str]) -> None:
    """The task's own stack probe (e.g. its attention implementation run for real)."""
    if ctx.task.stack_check is None:
        return
    probe = ctx.task.stack_check(ctx.device, ctx.spec.batch.precision)
    details["task_probe"] = probe
    if not probe.get("ok", False):
        failures.append(f"{probe.get('name', 'task probe')} does not run ({probe.get('error', '')})")
