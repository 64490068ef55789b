"""`estimate`: per-GPU memory of every configuration, before any weight is loaded (R23).

Each configuration (control, memory variants, fit-search points) runs one training update and the
evaluation pass under fake tensors, for the declared strategy and GPU count; the row holds the
figures per configuration and the `[estimate]` section of the record keeps them for the plan.
Nothing is allocated, so a model larger than this machine can still be estimated.
"""

from __future__ import annotations

from typing import Any

from ...analysis import memory_estimate as est
from ...core import dimensions
from ...core.events import RecordUpdate
from ...core.verdict import FAIL, PASS, WARN
from ..context import RunContext
from ..memory import workspaces
from ..memory.estimate.campaign import campaign_configs, estimate_configs, source_for, target_of
from ..memory.estimate.fake_run import MIB, NotEstimable
from .base import Outcome, PhaseRun, phase

WORKSPACES_KEY = "estimate.library_workspaces"
FIGURES = (
    "parameters",
    "buffers",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "ddp_buckets",
    "library_workspaces",
    "peak_allocated",
    "eval_peak_allocated",
    "eval_activations",
)


def flat_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures in MiB, flat, as the record and the plan read them."""
    keys = (
        "name",
        *(d.name for d in dimensions.estimable()),
        "strategy",
        "gpus",
        "estimable",
        "trainable_parameters",
        "seconds",
    )
    out: dict[str, Any] = {k: entry[k] for k in keys if k in entry}
    for key in FIGURES:
        if f"{key}_bytes" in entry:
            out[f"{key}_mb"] = round(entry[f"{key}_bytes"] / MIB, 3)
    if not entry.get("estimable"):
        out |= {"op": entry.get("op", ""), "reason": entry.get("reason", "")}
    verdict = entry.get("verdict") or {}
    out |= {k: v for k, v in verdict.items() if k != "reason"}
    if entry.get("smallest_configuration"):
        out["smallest_configuration"] = dict(entry["smallest_configuration"])
    return out


@phase("estimate")
def estimate(ctx: RunContext, run: PhaseRun) -> Outcome:
    target = target_of(ctx.loaded, **{k: run.overrides.get(k) for k in ("gpus", "strategy", "gpu_memory_gb")})
    configs = campaign_configs(ctx, target)

    def progress(done: int, total: int, message: str) -> None:
        ctx.check_cancel()
        ctx.progress(run.step.key, done, total, message=message)

    try:
        source = source_for(ctx)
    except NotEstimable as exc:  # a model the fake run cannot rebuild: a warning that says why
        why = {"op": exc.op, "reason": exc.reason, "configurations": [c.name for c in configs]}
        return Outcome(WARN, f"not estimable: {exc.reason}", why)
    fixed = device_workspaces(ctx)
    result = estimate_configs(source, configs, target, progress, fixed_bytes=fixed.bytes)
    entries = [flat_entry(e) for e in result["configurations"]]
    section = {
        "label": est.ESTIMATE_LABEL,
        "source": result["source"],
        "target": result["target"],
        "allowance": result["allowance"],
        "configurations": entries,
        "recommendation": result["recommendation"],
        "library_workspaces_mb": fixed.details()["library_workspaces_mb"],
        "left_out": workspaces.LEFT_OUT,
    }
    ctx.emit(RecordUpdate(section="estimate", value=section))
    details: dict[str, Any] = {
        "label": est.ESTIMATE_LABEL,
        "target": result["target"],
        "allowance": result["allowance"],
        "configurations": [est.line(e) for e in result["configurations"]],
        "estimates": entries,
        "left_out": workspaces.LEFT_OUT,
    } | fixed.details()
    if result["recommendation"]:
        details["recommendation"] = result["recommendation"]
    return estimate_verdict(result["configurations"], target.gpu_memory_gb, details)


def device_workspaces(ctx: RunContext) -> workspaces.Workspaces:
    """Measured once per runner: the libraries' workspaces do not change between estimates."""
    found = ctx.memo.get(WORKSPACES_KEY)
    if found is None:
        # Declared precisions only: a bf16 step's multiplies take a workspace of their own.
        declared = [ctx.spec.batch.precision, *(v.get("precision") for v in ctx.spec.variants)]
        precisions = tuple(sorted({str(p) for p in declared if p}))
        found = ctx.memo[WORKSPACES_KEY] = workspaces.measure(ctx.device, precisions)
    return found


def estimate_verdict(entries: list[dict[str, Any]], gpu_memory_gb: float, details: dict[str, Any]) -> Outcome:
    control = entries[0]
    blocked = [e for e in entries if not e.get("estimable")]
    too_big = [e["name"] for e in entries if (e.get("verdict") or {}).get("fits") is False]
    if not control.get("estimable"):
        return Outcome(WARN, f"control not estimable: {control.get('reason', '')}", details)
    v = control["verdict"]
    where = f"a {gpu_memory_gb:g} GB GPU" if gpu_memory_gb else "any common GPU"
    if v.get("fits") is False:
        smallest = control.get("smallest_configuration")
        hint = (
            f"; smallest that would: {smallest['strategy']} on {smallest['gpus']} × {smallest['gpu_memory_gb']} GB"
            if smallest
            else ""
        )
        return Outcome(
            FAIL,
            f"control needs {v['need_mib'] / 1024:.1f} GiB per GPU: it does not fit {where}{hint}",
            details,
        )
    notes = []
    if too_big:
        notes.append(f"does not fit {where}: {', '.join(too_big)}")
    if blocked:
        notes.append("not estimable: " + ", ".join(f"{e['name']} ({e.get('op', '?')})" for e in blocked))
    summary = (
        f"control needs {v['need_mib'] / 1024:.2f} GiB per GPU (smallest GPU {v.get('smallest_gpu_gb')} GB)"
    )
    if notes:
        return Outcome(WARN, f"{summary}; " + "; ".join(notes), details)
    return Outcome(PASS, summary, details)
