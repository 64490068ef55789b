"""The plan opens with its decision: configuration, memory and GPU, days with their range, cost,
blockers with their cause and first step — in at most six lines, before any detail."""

from __future__ import annotations

import copy
import dataclasses
import io
import tomllib
from pathlib import Path

import pytest
import tomli_w

from pilot_tui.analysis import plan
from pilot_tui.analysis.plan import decide
from pilot_tui.commands.plan import print_plan

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"


@pytest.fixture(scope="module")
def data() -> dict:
    return tomllib.loads(RECORD.read_text())


def first_lines(path: Path, price: float | None = None) -> tuple[list[str], int]:
    out = io.StringIO()
    code = print_plan(path, out, price_per_hour=price)
    return out.getvalue().splitlines(), code


def test_the_first_six_lines_hold_the_decision(tmp_path: Path, data) -> None:
    path = tmp_path / "record.toml"
    path.write_text(tomli_w.dumps(data))
    lines, code = first_lines(path, price=2.5)
    head = lines[:6]
    assert code == 0
    assert head[0].startswith("decision: rent with control (fp32, microbatch 2 × accumulation 2")
    assert head[1].startswith("memory:") and "not a GPU figure" in head[1]
    assert head[2].startswith("days:     3-day package:") and "control, mb1, ckpt" in head[2]
    # 3 days × 24 h × 1 GPU × $2.50 = $180, and the work's own hours at that price.
    computed = plan.compute_plan(data, record_dir=tmp_path)
    work = computed.package.need_h * 2.5
    assert work > 100  # shown in whole dollars
    assert head[3] == (
        f"cost:     $180 for the 3-day package (72 h × 1 GPU × $2.50/h); the work itself ${work:,.0f}"
    )
    assert head[4] == "blockers: none"
    # The details follow the decision, never before it.
    assert head[5] == "" and lines[6].startswith("pilot-tui plan · campaign demo")
    assert lines.index("Choice sheet") > 6


def test_without_a_price_the_cost_line_asks_for_one(tmp_path: Path, data) -> None:
    path = tmp_path / "record.toml"
    path.write_text(tomli_w.dumps(data))
    lines, _ = first_lines(path)
    assert lines[3] == "cost:     not priced: give --price-per-hour USD (per GPU-hour)"


def test_a_blocker_is_in_the_first_lines_with_its_cause_and_first_step(tmp_path: Path, data) -> None:
    broken = copy.deepcopy(data)
    save = next(p for p in broken["phases"] if p["step"] == "save")
    save["verdict"] = "fail"
    save["reason"] = "could not write ckpt.pt: No space left on device"
    path = tmp_path / "blocked.toml"
    path.write_text(tomli_w.dumps(broken))
    lines, code = first_lines(path, price=1.0)
    head = lines[:6]
    assert code == 1
    assert head[0].startswith("decision: do not rent yet")
    (blocker,) = [line for line in head if line.startswith("blocker:")]
    assert "save failed: could not write ckpt.pt: No space left on device" in blocker
    assert "— first: read the save row's error" in blocker


def test_the_range_of_the_days_is_the_sum_of_each_runs_range(data) -> None:
    computed = plan.compute_plan(data)
    span = plan.Interval(low_h=1.0, high_h=3.0, step_p10_s=0.1, step_p90_s=0.3, steady_updates=10)
    order = tuple(dataclasses.replace(o, interval=span) for o in computed.package.order)
    ranged = dataclasses.replace(computed, package=dataclasses.replace(computed.package, order=order))
    decision = decide(ranged, price_per_hour=10.0)
    assert decision.range_h == (len(order) * 1.0, len(order) * 3.0)
    assert f"(range {len(order):.2f}–{3 * len(order):.2f} h)" in decision.lines[2].text
    assert decision.cost is not None and decision.cost.work_low_usd == pytest.approx(10.0 * len(order))
    # One run without a range: no range at all, rather than a made-up one.
    partial = dataclasses.replace(
        ranged,
        package=dataclasses.replace(
            ranged.package, order=(dataclasses.replace(order[0], interval=None), *order[1:])
        ),
    )
    assert decide(partial).range_h is None


def test_many_blockers_still_fit_six_lines(data) -> None:
    computed = plan.compute_plan(data)
    many = tuple(f"{p} failed: broken — first: fix {p}" for p in ("save", "export", "resume", "final"))
    blocked = dataclasses.replace(computed, sheet=dataclasses.replace(computed.sheet, blocked_by=many))
    lines = decide(blocked, price_per_hour=1.0).text_lines()
    assert len(lines) == 6
    assert lines[-1] == "blocker:  and 3 more, in the sheet below"
