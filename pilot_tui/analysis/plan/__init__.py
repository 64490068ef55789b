"""From pilot to rental: the choice sheet and the 3/7/30-day package plan (R18, R19). Pure, no torch.

Everything here is computed from a record's data — the measured rows, the stack check, the
accounting — so a saved record can be re-planned at any time and the TUI, the headless CLI and
`pilot-tui plan` all show the same figures. The results are frozen dataclasses; they become a
dict only at the record's edge (`Plan.as_toml`, read back with `Plan.from_toml`).

    inputs   what a record holds, read once into typed facts
    sheet    the choice sheet: each configuration's gates, the one kept, memory per GPU
    package  each configuration's full run from its measured durations, fitted into a package
    caveats  what the figures assume, and what a renter reads first
    decision the few lines a renter reads first: configuration, GPU, days, cost, blockers
    build    the whole `Plan`
    render   the plan as text
"""

from .build import Plan, compute_plan, provisional_plan
from .caveats import busy_machine, tf32_note
from .decision import Cost, Decision, DecisionLine, decide, work_range
from .inputs import Environment, Facts, newest_rows, read_facts, spec_of
from .package import (
    DAY_S,
    PACKAGES,
    Interval,
    NotPlanned,
    PackagePlan,
    PlannedRun,
    Projection,
    interval,
    project,
)
from .render import plan_lines, summary_lines, text_lines
from .sheet import ChoiceSheet, Configuration, GpuNeed, choice_sheet, gpu_need, gpu_size, memory_caption
from .toml_io import PlanFormatError

__all__ = [
    "DAY_S",
    "PACKAGES",
    "ChoiceSheet",
    "Configuration",
    "Cost",
    "Decision",
    "DecisionLine",
    "Environment",
    "Facts",
    "GpuNeed",
    "Interval",
    "NotPlanned",
    "PackagePlan",
    "Plan",
    "PlanFormatError",
    "PlannedRun",
    "Projection",
    "busy_machine",
    "choice_sheet",
    "compute_plan",
    "decide",
    "gpu_need",
    "gpu_size",
    "interval",
    "memory_caption",
    "newest_rows",
    "plan_lines",
    "project",
    "provisional_plan",
    "read_facts",
    "spec_of",
    "summary_lines",
    "text_lines",
    "tf32_note",
    "work_range",
]
