"""The whole plan of a record: the choice sheet, the package, the caveats and the memory estimate."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.steps import campaign_steps
from .. import memory_estimate
from .caveats import assumptions, caveats
from .inputs import read_facts
from .package import PackagePlan, package_plan
from .sheet import ChoiceSheet, choice_sheet
from .toml_io import as_toml, from_toml


@dataclass(frozen=True)
class Plan:
    """The record's `[plan]`: sheet (R18), package (R19), caveats first, and the estimate (R23)."""

    sheet: ChoiceSheet
    package: PackagePlan
    caveats: tuple[str, ...] = ()
    # The fake-tensor estimate beside the measurement (analysis.memory_estimate.plan_view).
    estimate: Mapping[str, Any] | None = None
    # Set when the campaign stopped before its end: the plan of the rows so far.
    provisional: str | None = None

    def as_toml(self) -> dict[str, Any]:
        """The `[plan]` table the record keeps (the only place the plan is a dict)."""
        return as_toml(self)

    @classmethod
    def from_toml(cls, data: Any) -> Plan:
        """A `[plan]` this version wrote; PlanFormatError when it is not one (an older record)."""
        return from_toml(cls, data)


def compute_plan(
    data: Mapping[str, Any],
    provisional: str | None = None,
    *,
    record_dir: Path | None = None,
    schedule: Mapping[str, int] | None = None,
) -> Plan:
    """The plan of a record, from its own rows and spec.

    `record_dir`: the records' folder (the default `plan.checkpoint_dir`). `schedule`: `[plan]`
    keys to plan with instead of the record's (`pilot-tui plan --save-every …`): a new schedule
    is re-planned from the same measurements, without a new pilot.
    """
    facts = read_facts(data)
    if schedule:
        plan_spec = dataclasses.replace(facts.spec.plan, **schedule)
        facts = dataclasses.replace(facts, spec=dataclasses.replace(facts.spec, plan=plan_spec))
    sheet = choice_sheet(facts)
    package = package_plan(facts, sheet, assumptions(facts, sheet), record_dir)
    return Plan(
        sheet=sheet,
        package=package,
        caveats=caveats(facts, sheet, package, provisional),
        estimate=memory_estimate.plan_view(data) or None,
        provisional=provisional,
    )


def provisional_plan(
    data: Mapping[str, Any], *, record_dir: Path | None = None, schedule: Mapping[str, int] | None = None
) -> Plan:
    """The plan of a record that stopped before its end, marked provisional (or why there is none)."""
    facts = read_facts(data)
    steps = [s.key for s in campaign_steps(facts.spec)]
    planned = set(steps)
    done = set(facts.rows)
    missing = [k for k in steps if k not in done]
    listed = ", ".join(missing[:4]) + (", …" if len(missing) > 4 else "")
    return compute_plan(
        data,
        f"PROVISIONAL: the campaign stopped after {len(done & planned)} of {len(planned)} steps "
        f"({len(missing)} not run{': ' + listed if missing else ''})",
        record_dir=record_dir,
        schedule=schedule,
    )
