"""Made-up records for the plan's tests: rows of the shape the runner writes (`params`, `memory`,
`details`), with durations each test chooses (pure, no torch)."""

from __future__ import annotations

from typing import Any

import tomli_w
from conftest import deep_merge, demo_raw

PRECISION_OK = {"precision": "fp32", "ok": True, "error": "", "used_by": ["control"]}


def params(**changes: Any) -> dict[str, Any]:
    base = {
        "variant": "control",
        "microbatch": 4,
        "accumulation": 4,
        "replicas": 1,
        "max_length": 28,
        "precision": "fp32",
        "effective_batch": 16,
        "device": "cuda:0",
    }
    base |= changes
    base["effective_batch"] = base["microbatch"] * base["accumulation"] * base["replicas"]
    return base


def row(
    step: str,
    *,
    verdict: str = "pass",
    duration: float = 1.0,
    peak_reserved: float = 1000.0,
    peak_allocated: float = 800.0,
    details: dict[str, Any] | None = None,
    reason: str = "",
    **param_changes: Any,
) -> dict[str, Any]:
    phase, _, variant = step.partition("@")
    variant = variant or "control"
    return {
        "name": phase,
        "step": step,
        "variant": variant,
        "verdict": verdict,
        "reason": reason or ("all checks passed" if verdict == "pass" else "failed"),
        "duration_s": duration,
        "params": params(variant=variant, **param_changes),
        "memory": {
            "allocated_mb": peak_allocated / 2,
            "reserved_mb": peak_reserved / 2,
            "peak_allocated_mb": peak_allocated,
            "peak_reserved_mb": peak_reserved,
        },
        "details": details or {},
    }


def steady(step: str, step_time: float, **kw: Any) -> dict[str, Any]:
    details = {
        "updates": 20,
        "step_time_s": step_time,
        "step_time_p50_s": step_time,
        "step_time_p90_s": step_time * 1.1,
    }
    return row(step, duration=20 * step_time, details=details, **kw)


def stack_row(verdict: str = "pass", reason: str = "ok", precisions: list[dict] | None = None) -> dict:
    r = row("stack", verdict=verdict, reason=reason, duration=0.5, peak_reserved=0, peak_allocated=0)
    r["details"] = {
        "torch": "2.13.0",
        "cuda": "12.8",
        "device": "cuda:0",
        "gpus": [{"index": 0, "name": "Test GPU", "memory_mb": 81920, "capability": "9.0", "bf16": True}],
        "bf16": True,
        "precisions": precisions or [PRECISION_OK],
        "extensions": [],
    }
    return r


def engine_rows(variant: str = "control", step_time: float = 0.5, peak: float = 1000.0, **kw: Any) -> list:
    """The gated rows of one configuration (the control also gets load, save and export)."""
    at = "" if variant == "control" else f"@{variant}"
    out = []
    if variant == "control":
        out.append(row("load", duration=3.0, peak_reserved=peak * 0.3, **kw))
    out += [
        row(f"first_step{at}", duration=2 * step_time, peak_reserved=peak * 0.9, **kw),
        steady(f"steady{at}", step_time, peak_reserved=peak * 0.8, **kw),
        row(
            f"eval_longest{at}",
            duration=0.2,
            peak_reserved=peak,
            details={"validation_size": 48},
            eval_microbatch=kw.get("microbatch", 4),
            **kw,
        ),
    ]
    if variant == "control":
        out += [row("save", duration=4.0, **kw), row("export", duration=2.0, **kw)]
    return out


def record(
    rows: list[dict], spec_changes: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    raw = deep_merge(demo_raw(), spec_changes or {})
    if "variants" in (spec_changes or {}):
        raw["variants"] = spec_changes["variants"]
    data = {
        "schema": 1,
        "campaign": {
            "name": "demo",
            "id": "20260101-000000-abcd",
            "spec_path": "/nowhere/campaign.toml",
            "spec_text": tomli_w.dumps(raw),
            "spec": raw,
        },
        "environment": {"device": "cuda:0", "torch": "2.13.0", "cuda": "12.8", "devices": []},
        "accounting": {"effective_batch": 16},
        "dataset": {"splits": {"train": 371, "validation": 48, "test": 43}},
        "phases": rows,
    }
    return data | (extra or {})


NO_VARIANTS = {"variants": [], "plan": {"priority": ["control"]}}
