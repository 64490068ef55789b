"""Two records side by side, differences only: verdicts, memory and step time, plan, environment.

Measured figures move a little between any two runs, so memory and step time are shown as the
ratio B / A and only when it leaves [1 / (1 + TOLERANCE), 1 + TOLERANCE]; everything else
(verdicts, a variant's inputs, the plan's decision, versions) is shown whenever it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..analysis.plan import Plan
from ..core.rows import PhaseRow, newest_by_key, number, read_rows
from ..core.text import one_line

# A ratio within ±10 % is a rerun's noise, not a difference worth a line.
TOLERANCE = 0.10
# What a variant is: the inputs a reader compares between two records.
VARIANT_KEYS = (
    "microbatch",
    "accumulation",
    "replicas",
    "max_length",
    "precision",
    "activation_checkpointing",
)
ENVIRONMENT_KEYS = (
    "device",
    "torch",
    "cuda",
    "python",
    "torch_threads",
    "cpu_count",
    "platform",
    "pilot_tui",
    "code_revision",
)
LIBRARIES = ("transformers", "trl", "peft", "accelerate", "datasets", "tokenizers", "numpy", "safetensors")


MATCH = (
    "the records match: same verdicts, variants, plan and environment; "
    f"memory and step times within ±{TOLERANCE:.0%}"
)


@dataclass(frozen=True)
class Difference:
    """One thing that differs: the section it belongs to, what it is, its value in A and in B."""

    section: str
    item: str
    a: str
    b: str
    ratio: float | None = None

    def line(self) -> str:
        ratio = f"  (B/A {self.ratio:.2f}×)" if self.ratio is not None else ""
        return one_line(f"{self.section:<12} {self.item}: {self.a} → {self.b}{ratio}", 400)


def _text(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return one_line(value, 200)


def _ratio(a: float | None, b: float | None) -> float | None:
    """B / A when both are measured and A is not zero."""
    if a is None or b is None or a <= 0:
        return None
    return b / a


def _moved(ratio: float | None) -> bool:
    return ratio is not None and not (1 / (1 + TOLERANCE) <= ratio <= 1 + TOLERANCE)


def verdicts(a: Mapping[str, PhaseRow], b: Mapping[str, PhaseRow]) -> list[Difference]:
    out = []
    for key in [*a, *(k for k in b if k not in a)]:
        ra, rb = a.get(key), b.get(key)
        va = f"{ra.verdict.value}: {ra.reason}" if ra else "not run"
        vb = f"{rb.verdict.value}: {rb.reason}" if rb else "not run"
        if ra is None or rb is None or ra.verdict != rb.verdict:
            out.append(Difference("verdict", key, va, vb))
    return out


def measured(a: Mapping[str, PhaseRow], b: Mapping[str, PhaseRow]) -> list[Difference]:
    """Peak memory and steady step time of each step both records ran, as ratios."""
    out = []
    for key, ra in a.items():
        rb = b.get(key)
        if rb is None:
            continue
        ma, mb = ra.memory.peak(), rb.memory.peak()
        if ra.memory.basis != rb.memory.basis and ma is not None and mb is not None:
            # Peak RSS of a CPU process against peak reserved on a GPU: not one quantity.
            out.append(
                Difference(
                    "memory", key, f"{ma:.0f} MiB {ra.memory.basis}", f"{mb:.0f} MiB {rb.memory.basis}"
                )
            )
        elif _moved(r := _ratio(ma, mb)):
            out.append(Difference("memory", key, f"{ma:.0f} MiB", f"{mb:.0f} MiB", r))
        sa, sb = number(ra.details.get("step_time_s")), number(rb.details.get("step_time_s"))
        if ra.name == "steady" and _moved(r := _ratio(sa, sb)):
            out.append(Difference("step time", key, f"{sa * 1000:.4g} ms", f"{sb * 1000:.4g} ms", r))  # type: ignore[operator]
    return out


def variants(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    """A variant's inputs that changed, and variants only one record holds."""

    def table(data: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        items = data.get("variants")
        return (
            {str(v.get("id")): v for v in items or [] if isinstance(v, Mapping)}
            if isinstance(items, list)
            else {}
        )

    ta, tb = table(a), table(b)
    out = []
    for vid in [*ta, *(k for k in tb if k not in ta)]:
        va, vb = ta.get(vid), tb.get(vid)
        if va is None or vb is None:
            out.append(
                Difference("variant", vid, "present" if va else "absent", "present" if vb else "absent")
            )
            continue
        for key in VARIANT_KEYS:
            if va.get(key) != vb.get(key):
                out.append(Difference("variant", f"{vid}.{key}", _text(va.get(key)), _text(vb.get(key))))
    return out


def plans(a: Plan | None, b: Plan | None) -> list[Difference]:
    """The plan's decision: kept configuration, memory per GPU, package, hours, blockers."""
    if a is None or b is None:
        return [] if a is b else [Difference("plan", "plan", "yes" if a else "none", "yes" if b else "none")]
    out = []
    pairs = {
        "kept": (a.sheet.kept or "(none)", b.sheet.kept or "(none)"),
        "precision": (a.sheet.precision, b.sheet.precision),
        "package days": (a.package.days, b.package.days),
        "blocked by": ("; ".join(a.sheet.blocked_by) or "—", "; ".join(b.sheet.blocked_by) or "—"),
        "device": (a.sheet.device, b.sheet.device),
    }
    for item, (va, vb) in pairs.items():
        if va != vb:
            out.append(Difference("plan", item, _text(va), _text(vb)))
    for item, va, vb, unit in (
        ("memory per GPU", a.sheet.memory_per_gpu_mb, b.sheet.memory_per_gpu_mb, "MiB"),
        ("hours of work", a.package.need_h, b.package.need_h, "h"),
    ):
        if _moved(r := _ratio(va, vb)):
            out.append(Difference("plan", item, f"{va:.4g} {unit}", f"{vb:.4g} {unit}", r))
    ca = {c.id: c.status for c in a.sheet.configurations}
    cb = {c.id: c.status for c in b.sheet.configurations}
    for cid in [*ca, *(k for k in cb if k not in ca)]:
        if ca.get(cid) != cb.get(cid):
            out.append(Difference("plan", f"configuration {cid}", _text(ca.get(cid)), _text(cb.get(cid))))
    return out


def environments(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    """Versions, device, GPUs and world size."""

    def env(data: Mapping[str, Any]) -> dict[str, Any]:
        e = data.get("environment")
        e = e if isinstance(e, Mapping) else {}
        libs = e.get("libraries") if isinstance(e.get("libraries"), Mapping) else {}
        out: dict[str, Any] = {k: e.get(k) for k in ENVIRONMENT_KEYS}
        out |= {k: libs.get(k) for k in LIBRARIES}  # type: ignore[union-attr]
        devices = e.get("devices") if isinstance(e.get("devices"), list) else []
        out["gpus"] = ", ".join(
            str(d.get("name", "?"))
            for d in devices
            if isinstance(d, Mapping)  # type: ignore[union-attr]
        )
        acc = data.get("accounting") if isinstance(data.get("accounting"), Mapping) else {}
        out["world size"] = acc.get("replicas")  # type: ignore[union-attr]
        return out

    ea, eb = env(a), env(b)
    return [Difference("environment", k, _text(ea[k]), _text(eb[k])) for k in ea if ea[k] != eb[k]]


def differences(
    a: Mapping[str, Any], b: Mapping[str, Any], plan_a: Plan | None = None, plan_b: Plan | None = None
) -> list[Difference]:
    """Everything that differs between record A and record B, by section."""
    rows_a = newest_by_key(read_rows(a.get("phases")))
    rows_b = newest_by_key(read_rows(b.get("phases")))
    return [
        *verdicts(rows_a, rows_b),
        *variants(a, b),
        *measured(rows_a, rows_b),
        *plans(plan_a, plan_b),
        *environments(a, b),
    ]


def compare_lines(names: tuple[str, str], found: list[Difference]) -> list[str]:
    """`pilot-tui compare` output: a header, then one line per difference (or that they match)."""
    head = [one_line(f"A = {names[0]}"), one_line(f"B = {names[1]}")]
    if not found:
        return [*head, MATCH]
    return [*head, *(d.line() for d in found)]
