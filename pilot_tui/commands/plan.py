"""`pilot-tui plan RECORD`: the choice sheet and the package plan, recomputed from a saved record."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ..analysis.plan import Plan, compute_plan, decide, provisional_plan, text_lines
from ..analysis.plan.candidates import candidate_lines
from ..core.record import Record, RecordError
from ..core.spec import SpecError
from ..core.text import one_line


def plan_of(record: Record, schedule: Mapping[str, int] | None = None) -> Plan:
    """The record's plan recomputed from its rows (provisional when the campaign did not finish);
    RecordError when the record cannot be planned from."""
    where = record.path.parent
    try:
        if "plan" in record.data:
            return compute_plan(record.data, record_dir=where, schedule=schedule)
        return provisional_plan(record.data, record_dir=where, schedule=schedule)
    except (SpecError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise RecordError(f"{record.path}: cannot plan from this record: {exc}") from None


def print_plan(
    record_path: str | Path,
    out: TextIO | None = None,
    schedule: Mapping[str, int] | None = None,
    price_per_hour: float | None = None,
    prices: Mapping[str, float] | None = None,
) -> int:
    """Recompute the plan from the record's rows and print it, its decision first.

    Read-only: the record's own `[plan]` (written when the campaign finished) is left as it is.
    `schedule`: `[plan]` keys (save_every, keep, eval_every, …) to plan with instead of the
    record's. `price_per_hour`: USD per GPU-hour, to price the package and the work; `prices`:
    USD per GPU-hour by GPU name, to price the candidate GPUs side by side.
    Exit 0 when a configuration is kept and the priority work fits a package, else 1.
    """
    record = Record.read(record_path)  # RecordError: exit 2
    out = out or sys.stdout  # looked up at call time, so a redirected stdout is honoured
    finished = "plan" in record.data
    plan = plan_of(record, schedule)
    campaign = record.data.get("campaign") or {}
    # Record text is data: every printed line is escaped and bounded (R24).
    for line in decide(plan, price_per_hour).text_lines():
        print(one_line(line), file=out)
    print("", file=out)
    print(one_line(f"pilot-tui plan · campaign {campaign.get('name', '?')} · record {record.path}"), file=out)
    if not finished:
        print(
            "  (the record holds no [plan]: the campaign did not finish; computed now, not written)", file=out
        )
    if schedule:
        given = ", ".join(f"plan.{k} = {v}" for k, v in schedule.items())
        print(f"  (re-planned with {given} instead of the record's)", file=out)
    print("", file=out)
    for line in text_lines(plan):
        print(one_line(line), file=out)
    for line in candidate_lines(plan, prices):
        print(one_line(line), file=out)
    out.flush()
    return 0 if plan.sheet.kept and plan.package.fits_all else 1
