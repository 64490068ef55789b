"""The curves a record keeps, read into series: the overfit check, each LR run, each steady run.

Where each one lives in a record:
  overfit    `[[phases]]` row `overfit`: `details.loss_curve`, one loss per step
  LR runs    `[[runs]]`: `losses` (at `loss_updates` when present, else updates 1…n), `validation`
  variants   `[[phases]]` rows `steady` / `steady@V`: `details.losses`, one per timed update
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.rows import PhaseRow, newest_by_key, read_rows, read_runs
from .svg import Series, finite_points


@dataclass(frozen=True)
class CurveGroup:
    """Curves drawn on one chart: same x axis, comparable losses."""

    title: str
    x_label: str
    series: tuple[Series, ...]
    # Validation points of the LR runs, by run id (drawn as markers, not curves).
    markers: Mapping[str, tuple[tuple[float, float], ...]] | None = None


def _indexed(name: str, values: Any, xs: Any = None) -> Series:
    ys = values if isinstance(values, list) else []
    x = xs if isinstance(xs, list) and len(xs) == len(ys) else list(range(1, len(ys) + 1))
    return Series(name, finite_points(x, ys))


def curve_groups(data: Mapping[str, Any]) -> list[CurveGroup]:
    """Every curve of the record, grouped by chart; groups without a curve are left out."""
    rows = newest_by_key(read_rows(data.get("phases")))
    groups: list[CurveGroup] = []
    overfit = [_indexed(r.key, r.details.get("loss_curve")) for r in rows.values() if r.name == "overfit"]
    groups.append(CurveGroup("Overfit check: loss on the tiny subset", "step", tuple(overfit)))
    runs = read_runs(data.get("runs"))
    lr = tuple(_indexed(run.id, list(run.losses), run.loss_updates) for run in runs)
    markers = {run.id: tuple(run.validation_points()) for run in runs}
    groups.append(CurveGroup("LR board: training loss per run (dots: validation)", "update", lr, markers))
    steady = tuple(_steady(r) for r in rows.values() if r.name == "steady")
    groups.append(CurveGroup("Steady steps: loss per timed update, per configuration", "update", steady))
    return [g for g in groups if any(len(s.points) >= 2 for s in g.series)]


def _steady(row: PhaseRow) -> Series:
    return _indexed(row.key, row.details.get("losses"))


def step_times(data: Mapping[str, Any]) -> list[tuple[str, list[float]]]:
    """The steady rows' single step times (`details.step_times_s`), by step key."""
    rows = newest_by_key(read_rows(data.get("phases")))
    out = []
    for row in rows.values():
        times = row.details.get("step_times_s")
        if row.name == "steady" and isinstance(times, list):
            out.append(
                (row.key, [t for t in times if isinstance(t, int | float) and not isinstance(t, bool)])
            )
    return out
