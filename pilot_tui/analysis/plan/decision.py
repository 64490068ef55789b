"""The decision a plan comes to, in a few labelled lines: what to rent, for how long, at what cost.

A renter (or whoever signs off the rental) reads these first; every figure is the plan's own —
this module only picks and words them. `pilot-tui plan`, the report and the Plan pane show the
same lines, so at most `MAX_LINES` of them, each bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .build import Plan
from .package import PACKAGES

# The whole decision fits the top of an 80×24 screen with the header around it.
MAX_LINES = 6
# A line is cut here: the details below the decision carry the whole text.
LINE_CHARS = 150


@dataclass(frozen=True)
class DecisionLine:
    """One line of the decision: what it is about (`decision`, `memory`, …) and what it says."""

    label: str
    text: str

    def __str__(self) -> str:
        return f"{self.label + ':':<10}{self.text}"


@dataclass(frozen=True)
class Cost:
    """The package's price and the work's own (with its range), at a given price per GPU-hour."""

    price_per_hour: float
    gpus: int
    package_usd: float
    work_usd: float
    work_low_usd: float | None = None
    work_high_usd: float | None = None


@dataclass(frozen=True)
class Decision:
    """What the plan decides: kept configuration, GPU, package, cost and blockers."""

    kept: str
    rent: bool
    days: int
    need_h: float
    range_h: tuple[float, float] | None
    gpu: str
    cost: Cost | None
    blockers: tuple[str, ...]
    lines: tuple[DecisionLine, ...]

    def text_lines(self) -> list[str]:
        return [str(line) for line in self.lines]


def _cut(text: str, width: int = LINE_CHARS) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def work_range(plan: Plan) -> tuple[float, float] | None:
    """Hours of all planned work at its low and high step times; None when a run has no range."""
    order = plan.package.order
    if not order or any(o.interval is None for o in order):
        return None
    return (
        sum(o.interval.low_h for o in order if o.interval is not None),
        sum(o.interval.high_h for o in order if o.interval is not None),
    )


def _gpu(plan: Plan) -> str:
    """The GPU to rent, from the measured CUDA need, else the fake-tensor estimate, else unknown."""
    s = plan.sheet
    gpus = max(s.gpus, 1)
    need = s.gpu_need
    if need is not None:
        size = f"{need.smallest_gpu_gb} GB" if need.smallest_gpu_gb else "more than 141 GB"
        return f"rent {gpus} × {size} GPU (measured: {need.need_mb:.0f} MiB incl. CUDA context)"
    rec = (plan.estimate or {}).get("recommendation")
    if isinstance(rec, Mapping) and rec.get("gpu_memory_gb"):
        return (
            f"rent {rec.get('gpus', gpus)} × {rec['gpu_memory_gb']} GB GPU ({rec.get('basis', 'estimated')})"
        )
    return "GPU size unknown: pilot on a GPU or run `pilot-tui estimate`"


def _memory_line(plan: Plan, gpu: str) -> str:
    s = plan.sheet
    if s.gpu_need is not None:
        what = f"{s.memory_per_gpu_mb:.0f} MiB per GPU (peak reserved, +{s.headroom:.0%})"
    elif s.memory_basis.startswith("peak RSS"):
        what = f"{s.memory_per_gpu_mb:.0f} MiB (CPU process RSS, not a GPU figure)"
    else:
        what = f"{s.memory_per_gpu_mb:.0f} MiB per GPU ({s.memory_basis}, +{s.headroom:.0%})"
    return f"{what} → {gpu}"


def _cost(plan: Plan, price_per_hour: float | None, span: tuple[float, float] | None) -> Cost | None:
    if price_per_hour is None or not plan.package.order:
        return None
    gpus = max(plan.sheet.gpus, 1)
    days = plan.package.days or PACKAGES[-1]
    rate = price_per_hour * gpus
    return Cost(
        price_per_hour=price_per_hour,
        gpus=gpus,
        package_usd=days * 24 * rate,
        work_usd=plan.package.need_h * rate,
        work_low_usd=span[0] * rate if span else None,
        work_high_usd=span[1] * rate if span else None,
    )


def _usd(value: float) -> str:
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}"


def _blockers(plan: Plan) -> list[str]:
    """Each reason not to rent as the plan stands: a failed blocker phase, a disk that cannot hold it."""
    out = list(plan.sheet.blocked_by)
    disk = plan.package.disk
    if disk is not None and disk.status == "fail":
        out.append(f"disk: {disk.reason} — first: free space in {disk.checkpoint_dir} or lower plan.keep")
    return out


def decide(plan: Plan, price_per_hour: float | None = None) -> Decision:
    """The decision of `plan`, priced at `price_per_hour` (USD per GPU-hour) when given."""
    s, p = plan.sheet, plan.package
    blockers = _blockers(plan)
    rent = bool(s.kept) and p.fits_all and not blockers
    span = work_range(plan)
    gpu = _gpu(plan)
    cost = _cost(plan, price_per_hour, span)
    lines: list[DecisionLine] = []
    provisional = "provisional — " if plan.provisional else ""
    if s.kept:
        batch = (
            f"{s.precision}, microbatch {s.microbatch} × accumulation {s.accumulation} × "
            f"{s.replicas} replica(s) = {s.effective_batch} per update, {s.distribution}"
        )
        said = f"rent with {s.kept}" if rent else f"do not rent yet; best configuration {s.kept}"
        lines.append(DecisionLine("decision", f"{provisional}{said} ({batch})"))
    else:
        lines.append(
            DecisionLine("decision", f"{provisional}do not rent yet — no configuration kept: {s.kept_reason}")
        )
    lines.append(DecisionLine("memory", _memory_line(plan, gpu)))
    if p.order:
        ranged = f" (range {span[0]:.2f}–{span[1]:.2f} h)" if span else ""
        where = f"{p.days}-day package" if p.days else f"more than {PACKAGES[-1]} days"
        cpu = "; measured on the CPU: re-pilot on the GPU" if s.device.startswith("cpu") else ""
        lines.append(
            DecisionLine(
                "days",
                f"{where}: {p.need_h:.2f} h of work{ranged} for {', '.join(o.id for o in p.order)}, "
                f"{p.need_h / max(p.capacity_h, 1e-9):.0%} of {p.capacity_h:.0f} h{cpu}",
            )
        )
    else:
        lines.append(DecisionLine("days", p.summary))
    if cost is not None:
        work = _usd(cost.work_usd)
        if cost.work_low_usd is not None and cost.work_high_usd is not None:
            work += f" ({_usd(cost.work_low_usd)}–{_usd(cost.work_high_usd)})"
        days = p.days or PACKAGES[-1]
        lines.append(
            DecisionLine(
                "cost",
                f"{_usd(cost.package_usd)} for the {days}-day package ({days * 24} h × {cost.gpus} GPU × "
                f"{_usd(cost.price_per_hour)}/h); the work itself {work}",
            )
        )
    elif p.order:
        lines.append(DecisionLine("cost", "not priced: give --price-per-hour USD (per GPU-hour)"))
    room = MAX_LINES - len(lines)
    if not blockers:
        lines.append(DecisionLine("blockers", "none"))
    else:
        shown = blockers if len(blockers) <= room else blockers[: room - 1]
        lines += [DecisionLine("blocker", b) for b in shown]
        if len(shown) < len(blockers):
            lines.append(
                DecisionLine("blocker", f"and {len(blockers) - len(shown)} more, in the sheet below")
            )
    cut = tuple(DecisionLine(line.label, _cut(line.text)) for line in lines[:MAX_LINES])
    return Decision(
        kept=s.kept,
        rent=rent,
        days=p.days,
        need_h=p.need_h,
        range_h=span,
        gpu=gpu,
        cost=cost,
        blockers=tuple(blockers),
        lines=cut,
    )
