"""The plan a renter acts on: a time range, the machine's load, the GPU size, caveats
first, a provisional plan for an interrupted record; and headless lines that fit 80 columns."""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import tomllib
from pathlib import Path

import pytest

from pilot_tui.analysis import plan
from pilot_tui.analysis.plan import render, toml_io
from pilot_tui.commands.headless import phase_line
from pilot_tui.commands.plan import print_plan
from pilot_tui.core.rows import PhaseRow
from pilot_tui.core.steps import campaign_steps

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"


@pytest.fixture(scope="module")
def data() -> dict:
    return tomllib.loads(RECORD.read_text())


def test_interval_spans_p10_to_p90_around_the_mean_estimate(data) -> None:
    computed = plan.compute_plan(data)
    entry = computed.package.order[0]
    steady = dict(plan.newest_rows(data)["steady"].details)
    step = entry.step_time_s
    details = steady | {"step_time_p10_s": step * 0.8, "step_time_p90_s": step * 1.5}
    span = plan.interval(entry, steady_row(details))
    assert span is not None and span.steady_updates == steady["updates"]
    assert span.low_h < entry.total_h < span.high_h
    # No recorded spread (an older record): no range rather than a made-up one.
    assert plan.interval(entry, steady_row({"step_time_p90_s": step})) is None


def test_a_steady_row_timed_to_a_precision_gives_the_interval_of_its_mean(data) -> None:
    """The range is the 95 % interval of the mean step, widened by the measured contention, not
    the spread of single steps; the range line says so, and the plan reads back from TOML."""
    computed = plan.compute_plan(data)
    entry = computed.package.order[0]
    step = entry.step_time_s
    timed = {
        "updates": 240,
        "timed_updates": 240,
        "step_time_p10_s": step * 0.5,  # a wide spread of single steps…
        "step_time_p90_s": step * 2.0,
        "step_s_mean": step,
        "step_s_ci95": step * 0.02,  # …and a mean known to ±2 %
        "step_s_precision_target": 0.03,
        "timing_clock": "host",
        "runqueue_share": 0.1,
    }
    span = plan.interval(entry, steady_row(timed))
    assert span is not None and span.step_low_s is not None and span.step_high_s is not None
    # For the run's own updates: the prediction interval of its mean (analysis/step_time.py).
    half = 0.02 * math.sqrt(1 + 240 / (entry.updates - 1))
    assert span.step_low_s == pytest.approx(step * (1 - half) * 0.9)
    assert span.step_high_s == pytest.approx(step * (1 + half) * 1.1)
    wide = plan.interval(
        entry, steady_row({k: timed[k] for k in ("updates", "step_time_p10_s", "step_time_p90_s")})
    )
    assert wide is not None and wide.step_low_s is None
    assert wide.low_s < span.low_s < span.high_s < wide.high_s  # narrower than p10–p90
    placed = dataclasses.replace(entry, interval=span)
    line = render._range_line(placed)
    # The figures on the line, how they were made in the footnote below the package.
    assert line is not None and line.endswith("per update)¹") and "p10" not in line
    note = "\n".join(render.range_notes((placed,)))
    assert "±2.0% at 95 % confidence over 240 timed updates" in note
    assert "waited for a CPU 10%" in note and "confidence" not in line
    # A second configuration with the same causes: its figures, the explanation only once.
    twice = render.range_notes((placed, dataclasses.replace(placed, id="mb1")))
    assert twice[2].startswith("    mb1: ±2.0% at 95 % confidence") and "waited for a CPU 10%" in twice[2]
    assert "(other load)" in twice[1] and "(other load)" not in twice[2]
    back = toml_io.from_toml(plan.Interval, toml_io.as_toml(span))
    assert back == span


def steady_row(details: dict) -> PhaseRow:
    row = PhaseRow.from_toml({"name": "steady", "verdict": "pass", "details": details})
    assert row is not None
    return row


def test_a_busy_machine_is_named_and_an_idle_one_is_not() -> None:
    busy = plan.busy_machine(steady_row({"load_avg_1m": 5.2, "cpu_count": 2, "torch_threads": 1}))
    assert "busy" in busy and "5.2" in busy and "2 cores" in busy
    assert plan.busy_machine(steady_row({"load_avg_1m": 1.1, "cpu_count": 2, "torch_threads": 1})) == ""
    assert plan.busy_machine(steady_row({})) == ""


@pytest.mark.parametrize(
    ("need_mb", "gb"), [(1, 24), (24 * 1024, 24), (24 * 1024 + 1, 40), (81 * 1024, 141), (150 * 1024, 0)]
)
def test_gpu_size_is_the_smallest_common_size_that_holds_it(need_mb: float, gb: int) -> None:
    assert plan.gpu_size(need_mb) == gb


def test_cuda_need_adds_the_context_nvml_sees_and_the_headroom(data) -> None:
    row = PhaseRow.from_toml(
        {
            "name": "steady",
            "step": "steady",
            "variant": "control",
            "verdict": "pass",
            "memory": {"peak_reserved_mb": 30000.0, "reserved_mb": 20000.0, "nvml_used_mb": 20500.0},
        }
    )
    rows = {"steady": row}
    need = plan.gpu_need(rows, "control", 0.15)
    assert need.cuda_context_mb == 500.0
    assert need.need_mb == pytest.approx(30500 * 1.15, abs=0.1)
    assert need.smallest_gpu_gb == 40
    sheet = dataclasses.replace(plan.compute_plan(data).sheet, gpu_need=need, headroom=0.15)
    assert plan.memory_caption(sheet).startswith("per-GPU memory incl. CUDA context (NVML)")


def test_cpu_plan_text_puts_its_caveats_first(data) -> None:
    lines = plan.text_lines(plan.compute_plan(data))
    assert lines[0].startswith("! measured on the CPU")
    assert any(line.startswith("! memory: runner process peak RSS on CPU — not GPU memory") for line in lines)
    assert lines.index("Choice sheet") > 1


def test_an_interrupted_record_gets_a_provisional_plan(data, tmp_path: Path) -> None:
    import tomli_w

    cut = copy.deepcopy(data)
    cut["phases"] = cut["phases"][:12]
    cut.pop("plan")
    path = tmp_path / "cut.toml"
    path.write_text(tomli_w.dumps(cut))
    out = io.StringIO()
    print_plan(path, out)
    text = out.getvalue()
    planned = len(campaign_steps(plan.spec_of(data)))  # the record's own spec says what was planned
    assert f"! PROVISIONAL: the campaign stopped after 12 of {planned} steps" in text


def test_headless_phase_lines_fit_80_columns(data) -> None:
    for row in data["phases"]:
        line = phase_line(row)
        assert len(line) <= 80 and "\n" not in line
        assert line.split()[1] == row["verdict"]
        if len(str(row.get("reason", ""))) > 40:
            assert line.endswith("…")


def test_the_thread_count_caveat_is_said_once_for_every_configuration(data) -> None:
    cut = copy.deepcopy(data)
    for row in cut["phases"]:
        if row["name"] == "steady":
            row["details"] |= {"torch_threads": 1, "cpu_count": 2}
    caveats = plan.compute_plan(cut).caveats
    assert len(plan.compute_plan(cut).package.order) > 1
    assert sum("torch thread count" in c for c in caveats) == 1
