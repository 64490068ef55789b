"""Per-GPU memory estimates: what a configuration needs and which GPU holds it (pure, no torch, R23).

The runner estimates each configuration's peak allocated memory per rank under fake tensors
(`runner/estimate/`); this module turns those bytes into a need per GPU — the peak allocated plus
a stated allowance for the caching allocator and the CUDA context, then the campaign's headroom —
and into "fits" / "does not fit" against the common GPU sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.rows import PhaseRow, StepKey, newest_by_key, number, read_rows

MIB = 1024 * 1024
GIB = 1024 * MIB
# Common GPU memory sizes (GB, as rental offers name them) and the memory NVML reports on the usual
# cards of that size, in MiB: 24 GB (L4/A10/4090), 40 GB (A100-40), 48 GB (L40S/A6000),
# 80 GB (H100/A100-80), 141 GB (H200). A card holds a little less than its name says.
GPU_SIZES_GB = (24, 40, 48, 80, 141)
GPU_USABLE_MIB = {24: 23_028, 40: 40_960, 48: 46_068, 80: 81_559, 141: 143_771}
# Stated allowances beyond the tensors the estimate counts (docs/estimate.md):
# the CUDA context with the cuBLAS/cuDNN workspaces, and the allocator's reserved-but-unallocated
# share at the peak (rounding to blocks, fragmentation).
CUDA_CONTEXT_MIB = 1024
ALLOCATOR_SHARE = 0.10
GPU_COUNTS = (1, 2, 4, 8, 16)
ALLOWANCE_NOTE = (
    f"need = peak allocated × (1 + {ALLOCATOR_SHARE:.0%} caching allocator) × (1 + headroom) "
    f"+ {CUDA_CONTEXT_MIB} MiB CUDA context and library workspaces"
)
ESTIMATE_LABEL = "estimate (fake tensors, no GPU)"


def gpu_mib(size_gb: float) -> float:
    """Usable MiB of a GPU named `size_gb` GB: a common size's usual figure, else `size_gb` GiB."""
    if size_gb == int(size_gb) and int(size_gb) in GPU_USABLE_MIB:
        return float(GPU_USABLE_MIB[int(size_gb)])
    return size_gb * 1024


def need_mib(peak_allocated_bytes: float, headroom: float) -> float:
    """What one GPU must hold for this peak: allocator allowance, headroom, CUDA context."""
    return peak_allocated_bytes / MIB * (1 + ALLOCATOR_SHARE) * (1 + headroom) + CUDA_CONTEXT_MIB


def smallest_gpu(need: float, sizes: Sequence[int] = GPU_SIZES_GB) -> int | None:
    """The smallest common GPU size (GB) whose usable memory holds `need` MiB; None if none does."""
    return next((s for s in sizes if gpu_mib(s) >= need), None)


def entry_need(entry: Mapping[str, Any], headroom: float) -> float | None:
    """The per-GPU need of an estimated configuration: its training or eval peak, whichever is higher."""
    if not entry.get("estimable"):
        return None
    peak = max(float(entry.get("peak_allocated_bytes", 0)), float(entry.get("eval_peak_allocated_bytes", 0)))
    return need_mib(peak, headroom)


def verdict(entry: Mapping[str, Any], headroom: float, gpu_memory_gb: float = 0) -> dict[str, Any]:
    """fits / does not fit / not estimable for one configuration, with the smallest GPU that holds it."""
    need = entry_need(entry, headroom)
    if need is None:
        return {"fits": None, "status": "not estimable", "reason": str(entry.get("reason", ""))}
    out: dict[str, Any] = {"need_mib": round(need, 1), "smallest_gpu_gb": smallest_gpu(need)}
    if gpu_memory_gb:
        fits = need <= gpu_mib(gpu_memory_gb)
        out |= {"fits": fits, "status": "fits" if fits else "does not fit", "gpu_memory_gb": gpu_memory_gb}
    else:
        fits = out["smallest_gpu_gb"] is not None
        out |= {"fits": fits, "status": "fits" if fits else "does not fit"}
    return out


def extrapolate(entry: Mapping[str, Any], strategy: str, gpus: int) -> float:
    """Peak allocated bytes per rank of the same configuration on `gpus` ranks under `strategy`.

    From one estimate's components: FSDP divides parameters, gradients and optimizer state by the
    ranks and adds the unsharded blocks it gathers; DDP adds one gradient-sized bucket copy.
    Labelled as extrapolated wherever it is shown; a fake run of the chosen point confirms it.
    """
    params = float(entry.get("parameters_bytes", 0)) + float(entry.get("buffers_bytes", 0))
    grads = float(entry.get("gradients_bytes", 0))
    opt = float(entry.get("optimizer_state_bytes", 0))
    dynamic = float(entry.get("activations_bytes", 0)) + float(entry.get("temporaries_bytes", 0))
    ranks = max(1, int(entry.get("gpus", 1))) if entry.get("strategy") == "fsdp" else 1
    full = (params + grads + opt) * ranks  # back to one replica's static bytes
    if strategy == "fsdp":
        # Two gathered units (the one computing, the next prefetched): ~2/layers of the full weights.
        gathered = 2 * (params * ranks) / max(1, int(entry.get("shard_units", 1) or 1))
        return full / gpus + gathered + dynamic
    static = full
    if strategy == "ddp" and gpus > 1:
        static += grads * ranks
    return static + dynamic


def candidates(
    entry: Mapping[str, Any], headroom: float, sizes: Sequence[int] = GPU_SIZES_GB
) -> list[dict[str, Any]]:
    """Rentals that would hold this configuration by extrapolation, cheapest first (GPU memory in
    all, then fewer GPUs): one GPU without a strategy, or 2-16 GPUs with FSDP."""
    options = []
    for gpus in GPU_COUNTS:
        strategy = "none" if gpus == 1 else "fsdp"
        need = need_mib(extrapolate(entry, strategy, gpus), headroom)
        size = smallest_gpu(need, sizes)
        if size is not None:
            options.append((size * gpus, gpus, size, strategy, need))
    return [
        {"gpus": gpus, "gpu_memory_gb": size, "strategy": strategy, "need_mib": round(need, 1)}
        for _, gpus, size, strategy, need in sorted(options)
    ]


def smallest_configuration(
    entry: Mapping[str, Any], headroom: float, sizes: Sequence[int] = GPU_SIZES_GB
) -> dict[str, Any] | None:
    """The cheapest rental that holds this configuration, by extrapolation."""
    found = candidates(entry, headroom, sizes)
    return found[0] if found else None


def format_mib(value_bytes: float) -> str:
    mib = value_bytes / MIB
    if mib >= 1024:
        return f"{mib / 1024:.2f} GiB"
    return f"{mib:.1f} MiB" if mib >= 1 else f"{value_bytes / 1024:.1f} KiB"


def describe(entry: Mapping[str, Any]) -> str:
    """The configuration in a few words: strategy × GPUs, microbatch, length, precision, checkpointing,
    the optimizer when it is not AdamW."""
    parts = [
        f"{entry.get('strategy', 'none')}×{entry.get('gpus', 1)}",
        f"mb {entry.get('microbatch')}",
        f"len {entry.get('max_length')}",
        str(entry.get("precision", "")),
    ]
    if entry.get("activation_checkpointing"):
        parts.append("ckpt")
    if entry.get("optimizer", "adamw") != "adamw":  # records from before the optimizer dimension: AdamW
        parts.append(str(entry["optimizer"]))
    return " ".join(parts)


def line(entry: Mapping[str, Any]) -> str:
    """One printed line per configuration: verdict, need, peak and its components."""
    name = f"{entry.get('name', '?')}: {describe(entry)}"
    if not entry.get("estimable"):
        return f"{name}: not estimable ({entry.get('op', '?')}) — {entry.get('reason', '')}"
    v = entry.get("verdict") or {}
    target = f" {v['gpu_memory_gb']:g} GB" if v.get("gpu_memory_gb") else ""
    smallest = v.get("smallest_gpu_gb")
    holds = f"smallest GPU {smallest} GB" if smallest else "no single common GPU holds it"
    parts = ", ".join(
        f"{label} {format_mib(float(entry.get(key, 0)))}"
        for label, key in (
            ("params", "parameters_bytes"),
            ("grads", "gradients_bytes"),
            ("optimizer", "optimizer_state_bytes"),
            ("activations", "activations_bytes"),
            ("temporaries", "temporaries_bytes"),
        )
    )
    return (
        f"{name}: {v.get('status', '?')}{target} — needs {v.get('need_mib', 0) / 1024:.2f} GiB per GPU "
        f"({holds}); peak allocated {format_mib(float(entry['peak_allocated_bytes']))} "
        f"[{parts}], eval peak {format_mib(float(entry.get('eval_peak_allocated_bytes', 0)))}"
    )


def recommendation(entries: Iterable[Mapping[str, Any]], headroom: float) -> dict[str, Any] | None:
    """The rental for the control (the first entry): GPU size and count, from the estimate."""
    for entry in entries:
        if entry.get("name") != "control" or not entry.get("estimable"):
            continue
        v = entry.get("verdict") or {}
        if v.get("smallest_gpu_gb"):
            return {
                "gpus": int(entry.get("gpus", 1)),
                "gpu_memory_gb": v["smallest_gpu_gb"],
                "strategy": entry.get("strategy", "none"),
                "need_mib": v.get("need_mib"),
                "basis": "estimated",
            }
        # The confirmed one when the runner checked it by a fake run, else the extrapolation.
        smallest = entry.get("smallest_configuration") or smallest_configuration(entry, headroom)
        if not smallest:
            return None
        return {"basis": "extrapolated from the estimate"} | dict(smallest)
    return None


def calibration(estimate_bytes: float | None, measured_mib: float | None) -> dict[str, Any] | None:
    """Estimate vs measured peak allocated (CUDA): the ratio measured / estimate."""
    if not estimate_bytes or measured_mib is None or measured_mib <= 0:
        return None
    est = estimate_bytes / MIB
    return {
        "estimate_mib": round(est, 1),
        "measured_mib": round(measured_mib, 1),
        "ratio": round(measured_mib / est, 3),
    }


# ------------------------------------------------------------------ the plan's view (R18, R23)


def _peak_of(rows: Mapping[str, PhaseRow], keys: Sequence[str], cuda: bool) -> float | None:
    values = [
        v
        for k in keys
        if k in rows
        and (v := rows[k].memory.peak_allocated_mb if cuda else rows[k].memory.peak_rss_mb) is not None
    ]
    return max(values) if values else None


def _measured(
    name: str, rows: Mapping[str, PhaseRow], fit_points: Mapping[str, Any], cuda: bool
) -> dict[str, Any]:
    """The pilot's measured training and eval peaks of one configuration: peak allocated on CUDA,
    peak RSS on CPU (the fit-search points carry their own)."""
    if name.startswith("fit-"):
        point = fit_points.get(name) or {}
        suffix = "_allocated_mb" if cuda else "_mb"
        return {
            "train_mb": number(point.get(f"train_peak{suffix}")),
            "eval_mb": number(point.get(f"eval_peak{suffix}")),
        }
    first, evaluated = rows.get(StepKey("first_step", name).key), rows.get(StepKey("eval_longest", name).key)
    shapes = (first.details.get("input_shapes") if first else None) or []
    eval_shape = (evaluated.details.get("input_shape") if evaluated else None) or []
    return {
        "train_mb": _peak_of(rows, [StepKey("first_step", name).key, StepKey("steady", name).key], cuda),
        "eval_mb": _peak_of(rows, [StepKey("eval_longest", name).key], cuda),
        # The widths the pilot measured on: the sampler's batches and the longest validation batch.
        "train_width": max((int(s[-1]) for s in shapes if isinstance(s, list) and len(s) > 1), default=None),
        "eval_width": int(eval_shape[-1]) if isinstance(eval_shape, list) and len(eval_shape) > 1 else None,
    }


def plan_view(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """Estimate beside measurement for every configuration, and the rental it recommends.

    On a CUDA pilot: estimate vs measured peak allocated with their ratio (the calibration on this
    kind of model), and the recommendation scaled by the control's ratio. On a CPU pilot: the
    estimate, labelled as one, beside the measured peak RSS, which says nothing about a GPU.
    """
    section = data.get("estimate")
    if not isinstance(section, Mapping) or not section.get("configurations"):
        return None
    rows = newest_by_key(read_rows(data.get("phases")))
    cuda = any(r.memory.on_cuda for r in rows.values())
    fit = data.get("fit") if isinstance(data.get("fit"), Mapping) else {}
    points = {
        f"fit-mb{p.get('microbatch')}-len{p.get('max_length')}": p for p in (fit or {}).get("points") or []
    }
    headroom = float((section.get("target") or {}).get("headroom", 0.15))
    out_rows = []
    for entry in section["configurations"]:
        name = str(entry.get("name"))
        item: dict[str, Any] = {"name": name, "estimable": bool(entry.get("estimable"))}
        if entry.get("estimable"):
            item |= {
                "estimate_train_mb": entry.get("peak_allocated_mb"),
                "estimate_eval_mb": entry.get("eval_peak_allocated_mb"),
                "need_mib": entry.get("need_mib"),
                "status": entry.get("status"),
                "smallest_gpu_gb": entry.get("smallest_gpu_gb"),
            }
        else:
            item["reason"] = f"not estimable ({entry.get('op', '?')}): {entry.get('reason', '')}"
        measured = _measured(name, rows, points, cuda)
        item |= {f"measured_{k}": v for k, v in measured.items() if v is not None}
        length = entry.get("max_length")
        narrower = [
            f"{part} on {measured[f'{part}_width']} tokens"
            for part in ("train", "eval")
            if measured.get(f"{part}_width") and length and measured[f"{part}_width"] < int(length)
        ]
        for part in ("train", "eval"):
            width = measured.get(f"{part}_width")
            item[f"{part}_same_length"] = not (width and length and width < int(length))
        if narrower and cuda:
            # The estimate is for the longest sequences the configuration admits; the pilot's
            # batches may be shorter, and then the measurement is lower for that reason alone.
            item["width_note"] = f"measured {', '.join(narrower)}; estimated on {length}"
        if cuda and entry.get("estimable"):
            for part in ("train", "eval"):
                cal = calibration(
                    _mib_bytes(entry.get(f"{'peak' if part == 'train' else 'eval_peak'}_allocated_mb")),
                    measured.get(f"{part}_mb"),
                )
                if cal:
                    item[f"{part}_ratio"] = cal["ratio"]
        out_rows.append(item)
    view: dict[str, Any] = {
        "label": section.get("label", ESTIMATE_LABEL),
        "device": "cuda" if cuda else "cpu",
        "measured_counter": "peak allocated" if cuda else "peak RSS (whole CPU process, not a GPU figure)",
        "target": dict(section.get("target") or {}),
        "allowance": section.get("allowance", ALLOWANCE_NOTE),
        "configurations": out_rows,
    }
    rec = section.get("recommendation")
    if isinstance(rec, Mapping):
        view["recommendation"] = dict(rec)
        control = next((r for r in out_rows if r["name"] == "control"), {})
        ratio = control.get("train_ratio")
        if cuda and ratio and control.get("estimate_train_mb"):
            # Calibrated: the estimate's need scaled by what this GPU measured for the control.
            peak = (
                max(float(control["estimate_train_mb"]), float(control.get("estimate_eval_mb") or 0)) * ratio
            )
            need = need_mib(peak * MIB, headroom)
            view["recommendation"] |= {
                "calibrated_need_mib": round(need, 1),
                "calibrated_gpu_gb": smallest_gpu(need),
                "calibration_ratio": ratio,
            }
    return view


def _mib_bytes(mib: Any) -> float | None:
    return float(mib) * MIB if isinstance(mib, int | float) else None


def plan_view_lines(view: Mapping[str, Any] | None) -> list[str]:
    """The plan's estimate block as text."""
    if not view:
        return []
    t = view.get("target") or {}
    lines = [
        "",
        f"Memory per GPU, {view['label']}: {t.get('strategy', 'none')} on {t.get('gpus', 1)} GPU(s); "
        f"measured: {view['measured_counter']}",
        f"  allowance: {view['allowance']}",
    ]
    for r in view["configurations"]:
        if not r["estimable"]:
            lines.append(f"  {r['name']:<16} {r['reason']}")
            continue
        measured = ""
        if "measured_train_mb" in r:
            measured = f" · measured train {r['measured_train_mb']:.1f} MiB"
            if "train_ratio" in r:
                measured += f" (measured/estimate {r['train_ratio']:.2f})"
        if "measured_eval_mb" in r:
            measured += f" · measured eval {r['measured_eval_mb']:.1f} MiB"
            if "eval_ratio" in r:
                measured += f" (measured/estimate {r['eval_ratio']:.2f})"
        if "width_note" in r:
            measured += f" ({r['width_note']})"
        lines.append(
            f"  {r['name']:<16} estimate train {r['estimate_train_mb']:.1f} MiB, eval {r['estimate_eval_mb']:.1f} MiB"
            f" · needs {float(r['need_mib']) / 1024:.2f} GiB · {r['status']}{measured}"
        )
    rec = view.get("recommendation")
    if rec:
        line = (
            f"  rent: {rec['gpus']} × {rec['gpu_memory_gb']} GB ({rec['strategy']}), "
            f"{float(rec['need_mib']) / 1024:.1f} GiB per GPU ({rec['basis']})"
        )
        if "calibrated_need_mib" in rec:
            line += (
                f"; calibrated by this GPU's ratio {rec['calibration_ratio']:.2f}: "
                f"{rec['calibrated_need_mib'] / 1024:.1f} GiB → {rec['calibrated_gpu_gb']} GB"
            )
        lines.append(line)
    return lines
