"""Memory variants side by side and the largest configuration that fits: pure arithmetic, no torch.

The runner measures (rows, tensor sizes, targets); this module turns the measurements into the
flat `[[variants]]` entries and the `[fit]` result the record keeps and the TUI shows (R11, R12).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core import dimensions, phase_table
from ..core.rows import PhaseRow
from ..core.verdict import worst

# Fit-search point statuses.
FITS, OOM, OVER_CEILING, ERROR = "fits", "oom", "over_ceiling", "error"

NO_CONTROL = "no ratio: the control's first_step / steady / eval_longest rows have not run in this runner"
CPU_MEMORY_NOTE = (
    "CPU: peak RSS is the whole process (Python, the torch library, the data, other states). "
    "process_baseline_mb is the RSS before this configuration's first phase; dynamic_peak_mb is "
    "peak minus that baseline. RSS does not shrink when memory is freed and freed pages are reused, "
    "so dynamic and activation figures are lower bounds; saved_activations_mb is exact (tensors "
    "kept for backward)."
)
CUDA_MEMORY_NOTE = (
    "CUDA: activation_peak_mb = peak allocated - (weights + gradients + optimizer state) - other "
    "training states resident on the device; saved_activations_mb counts the tensors kept for backward."
)
ACCUMULATION_NOTE = (
    "accumulation and a smaller microbatch shrink activations only: weights, gradients and "
    "optimizer state (static_mb) stay the same"
)


# Figure -> the name of its ratio to the control in a `[[variants]]` entry.
RATIO_KEYS = {
    "peak_allocated_mb": "peak_allocated_ratio",
    "peak_reserved_mb": "peak_reserved_ratio",
    "peak_rss_mb": "peak_rss_ratio",
    "step_time_s": "step_time_ratio",
    "examples_per_s": "examples_per_s_ratio",
    "static_mb": "static_ratio",
    "activation_peak_mb": "activation_peak_ratio",
    "saved_activations_mb": "saved_activations_ratio",
}


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, rounded; None when either is missing or the reference is not positive."""
    if value is None or reference is None or not math.isfinite(value) or not math.isfinite(reference):
        return None
    if reference <= 0:
        return None
    return round(value / reference, 4)


def share(part: int, total: int) -> float:
    """part / total as a fraction in [0, 1]; 0 when there is nothing to count."""
    return round(part / total, 4) if total > 0 else 0.0


def variant_phase_rows(
    rows: Sequence[PhaseRow], variant: str, phases: Sequence[str] | None = None
) -> dict[str, PhaseRow]:
    """By phase name, the newest row of each measured phase of one variant (a rerun replaces the
    earlier one). `phases` defaults to the phases every memory variant re-measures."""
    wanted = phase_table.per_variant() if phases is None else tuple(phases)
    out: dict[str, PhaseRow] = {}
    for row in rows:
        if row.variant == variant and row.name in wanted:
            out[row.name] = row
    return out


def peaks(rows: Iterable[PhaseRow]) -> dict[str, float]:
    """Max over the rows of each peak counter present (allocated and reserved kept apart, R6)."""
    out: dict[str, float] = {}
    for row in rows:
        for key, value in row.memory.peaks().items():
            out[key] = max(out.get(key, 0.0), value)
    return out


def throughput(rows: Mapping[str, PhaseRow]) -> dict[str, float]:
    """Step time and examples per second, from the steady row when it passed its measurement."""
    steady = rows.get("steady")
    details = steady.details if steady is not None else {}
    out = {}
    for key in ("step_time_s", "examples_per_s"):
        if isinstance(details.get(key), int | float):
            out[key] = float(details[key])
    return out


def memory_breakdown(
    *,
    device_kind: str,
    weights_mb: float,
    gradients_mb: float,
    optimizer_state_mb: float,
    peak: Mapping[str, float],
    other_states_mb: float = 0.0,
    process_baseline_mb: float | None = None,
) -> dict[str, Any]:
    """Static (weights + gradients + optimizer state) vs dynamic memory of one configuration.

    CUDA: activation peak = peak allocated - static - other resident training states.
    CPU: the RSS peak holds the whole process, so the dynamic part is measured from the RSS before
    this configuration's first phase, and the activation peak is that dynamic part minus static.
    """
    static = weights_mb + gradients_mb + optimizer_state_mb
    out: dict[str, Any] = {
        "weights_mb": round(weights_mb, 3),
        "gradients_mb": round(gradients_mb, 3),
        "optimizer_state_mb": round(optimizer_state_mb, 3),
        "static_mb": round(static, 3),
        "other_states_mb": round(other_states_mb, 3),
    }
    if device_kind == "cuda":
        if "peak_allocated_mb" in peak:
            out["activation_peak_mb"] = round(
                max(0.0, peak["peak_allocated_mb"] - static - other_states_mb), 3
            )
        out["memory_note"] = CUDA_MEMORY_NOTE
    else:
        if process_baseline_mb is not None and "peak_rss_mb" in peak:
            dynamic = max(0.0, peak["peak_rss_mb"] - process_baseline_mb)
            out["process_baseline_mb"] = round(process_baseline_mb, 3)
            out["dynamic_peak_mb"] = round(dynamic, 3)
            out["activation_peak_mb"] = round(max(0.0, dynamic - static), 3)
        out["memory_note"] = CPU_MEMORY_NOTE
    return out


def ratios_to_control(entry: Mapping[str, Any], control: Mapping[str, Any] | None) -> dict[str, Any]:
    """`<key>_ratio` for every comparable figure the control also has; a note when it has none."""
    if control is None:
        return {"control_measured": False, "ratio_note": NO_CONTROL}
    out: dict[str, Any] = {"control_measured": True}
    for key, name in RATIO_KEYS.items():
        r = ratio(entry.get(key), control.get(key))
        if r is not None:
            out[name] = r
    return out


def compare_entry(
    variant: str,
    params: Mapping[str, Any],
    rows: Mapping[str, PhaseRow],
    breakdown: Mapping[str, Any],
    question: Mapping[str, Any],
    control: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One flat `[[variants]]` entry: params, peaks, throughput, breakdown, question, ratios.

    `rows` are the variant's latest measured rows by phase; `control` is the control's own entry
    (built the same way from its rows) or None when the control has not run.
    """
    entry: dict[str, Any] = {"id": variant, "is_control": variant == "control"}
    # Every configuration dimension (core/dimensions.py) beside the batch figures and the device.
    keys = (*(d.params_key for d in dimensions.DIMENSIONS), "replicas", "effective_batch", "device")
    for key in keys:
        if key in params:
            entry[key] = params[key]
    entry["notes"] = list(params.get("notes") or [])
    measured = phase_table.per_variant()
    entry["verdict"] = worst(r.verdict for r in rows.values()).value
    missing = [p for p in measured if p not in rows]
    reasons = [f"{p}: {rows[p].reason}" for p in measured if p in rows and rows[p].verdict != "pass"]
    reasons += [f"{p}: not run" for p in missing]
    if missing:
        entry["verdict"] = "fail"
    entry["reason"] = "; ".join(reasons) if reasons else f"all {len(measured)} phases passed"
    for p in measured:
        entry[f"{p}_verdict"] = rows[p].verdict if p in rows else "not run"
    entry |= peaks(rows.values())
    entry |= throughput(rows)
    entry |= dict(breakdown)
    entry |= dict(question)
    entry |= ratios_to_control(entry, control)
    return entry


def question_change(
    *,
    examples: int,
    targets_changed: int,
    supervised_lost: int,
    supervised_control: int,
    effective_batch: int,
    control_effective_batch: int,
    params: Mapping[str, Any] | None = None,
    control_params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """R12: does the variant still ask the control's question?

    Targets that changed (a max length that cuts supervised tokens the control kept) change the
    question; so does an effective batch that was not kept, and any dimension the table marks
    as changing it (another optimizer makes other updates). Memory mechanics alone do not.
    """
    reasons = []
    for d in dimensions.DIMENSIONS:
        if params is None or control_params is None:
            continue
        mine, theirs = params.get(d.params_key), control_params.get(d.params_key)
        if mine is not None and theirs is not None and d.changes_question(theirs, mine):
            reasons.append(f"{d.name} {theirs} -> {mine}")
    if targets_changed:
        reasons.append(
            f"{targets_changed} of {examples} training examples ({100 * share(targets_changed, examples):.1f}%) "
            f"have different targets ({supervised_lost} supervised tokens lost)"
        )
    if effective_batch != control_effective_batch:
        reasons.append(f"effective batch {control_effective_batch} -> {effective_batch}")
    return {
        "changes_question": bool(reasons),
        "targets_changed": targets_changed,
        "targets_changed_share": share(targets_changed, examples),
        "supervised_tokens_lost": supervised_lost,
        "supervised_tokens_lost_share": share(supervised_lost, supervised_control),
        "question_note": "; ".join(reasons) if reasons else "same targets and effective batch as the control",
    }


def accumulation_for(effective_batch: int, microbatch: int, replicas: int = 1) -> tuple[int, bool]:
    """The accumulation that keeps `effective_batch` with this microbatch, and whether it is exact.

    When it does not divide, the next larger accumulation is returned (the effective batch grows a
    little rather than silently shrinking) and `exact` is False.
    """
    per_update = microbatch * replicas
    accumulation = max(1, -(-effective_batch // per_update))
    return accumulation, accumulation * per_update == effective_batch


def largest_fitting(
    points: Sequence[Mapping[str, Any]], prefer_max_length: int = 0
) -> Mapping[str, Any] | None:
    """The largest fitting microbatch at the declared max length (it keeps the question, R12);
    when nothing fits there (or it was not tried), at the largest max length where something fits."""
    fitting = [p for p in points if p.get("status") == FITS]
    if not fitting:
        return None
    same = [p for p in fitting if int(p["max_length"]) == prefer_max_length]
    return max(same or fitting, key=lambda p: (int(p["max_length"]), int(p["microbatch"])))


def fit_result(
    points: Sequence[Mapping[str, Any]],
    *,
    declared_microbatch: int,
    declared_max_length: int,
    effective_batch: int,
    replicas: int,
    ceiling_mb: float,
    counter: str,
) -> dict[str, Any]:
    """The `[fit]` section: every tried point, the largest passing one, its accumulation."""
    best = largest_fitting(points, declared_max_length)
    out: dict[str, Any] = {
        "counter": counter,
        "ceiling_mb": ceiling_mb,
        "declared_microbatch": declared_microbatch,
        "declared_max_length": declared_max_length,
        "declared_effective_batch": effective_batch,
        "tried": len(points),
        "fits": sum(1 for p in points if p.get("status") == FITS),
        "found": best is not None,
    }
    per_length = []
    for length in sorted({int(p["max_length"]) for p in points}):
        fitting = [
            int(p["microbatch"]) for p in points if int(p["max_length"]) == length and p.get("status") == FITS
        ]
        item: dict[str, Any] = {"max_length": length, "fits": bool(fitting)}
        if fitting:
            acc, exact = accumulation_for(effective_batch, max(fitting), replicas)
            item |= {"largest_microbatch": max(fitting), "accumulation": acc, "keeps_effective_batch": exact}
        per_length.append(item)
    out["per_max_length"] = per_length
    if best is not None:
        mb = int(best["microbatch"])
        acc, exact = accumulation_for(effective_batch, mb, replicas)
        out |= {
            "largest_microbatch": mb,
            "max_length": int(best["max_length"]),
            "accumulation": acc,
            "effective_batch": mb * acc * replicas,
            "keeps_effective_batch": exact,
        }
        if not exact:
            out["note"] = (
                f"{effective_batch} is not a multiple of {mb * replicas}: accumulation {acc} gives "
                f"{mb * acc * replicas}; the effective batch is not the declared one"
            )
    out["points"] = [dict(p) for p in points]
    return out
