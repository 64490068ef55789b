"""rows.py: every record written so far reads through one typed view (pure, no torch)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pilot_tui.analysis.plan import compute_plan
from pilot_tui.core.rows import Memory, PhaseRow, StepKey, newest_by_key, read_rows

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"


def test_every_row_of_a_current_record_reads_with_its_figures() -> None:
    data = tomllib.loads(RECORD.read_text())
    rows = read_rows(data["phases"])
    assert len(rows) == len(data["phases"]) > 20
    for row, raw in zip(rows, data["phases"], strict=True):
        assert row.key == raw["step"] and row.verdict == raw["verdict"]
        assert row.name == raw["name"] and row.variant == raw["variant"]
        # A CPU record: the peak is the RSS peak, never a sum of counters.
        assert row.memory.peak() == raw["memory"].get("peak_rss_mb")
    # And the plan still computes from it.
    assert compute_plan(data).sheet.kept == "control"


def test_the_peak_is_reserved_on_cuda_rss_on_cpu_and_never_a_sum() -> None:
    cuda = Memory.from_toml({"peak_allocated_mb": 700.0, "peak_reserved_mb": 900.0, "peak_rss_mb": 3000.0})
    assert cuda.peak() == 900.0 and cuda.on_cuda and "reserved" in cuda.basis
    assert cuda.summary() == "peak alloc 700 MiB · peak reserved 900 MiB"
    cpu = Memory.from_toml({"peak_rss_mb": 312.5, "rss_mb": 300.0})
    assert cpu.peak() == 312.5 and not cpu.on_cuda and "RSS" in cpu.basis
    assert Memory.from_toml({}).peak() is None and Memory.from_toml(None).summary() == "no memory reading"
    # A mistyped or non-finite figure reads as absent, not as a number.
    assert Memory.from_toml({"peak_rss_mb": "12", "peak_reserved_mb": float("nan")}).peak() is None


def test_step_keys_parse_and_label_in_one_place() -> None:
    assert StepKey.parse("steady@bf16") == StepKey("steady", "bf16")
    assert StepKey.parse("steady") == StepKey("steady", "control")
    assert StepKey.parse("lr_run@lr1e-4-s0").label == "lr_run [lr1e-4-s0]"
    assert StepKey.parse("steady#2").key == "steady"  # a second row of the same step
    assert StepKey("steady", "control").label == "steady"


def test_rows_of_older_records_and_broken_rows_read_tolerantly() -> None:
    old = {"name": "steady", "variant": "mb1", "verdict": "pass", "duration_s": 2, "memory": {}}
    row = PhaseRow.from_toml(old)
    assert row is not None and row.key == "steady@mb1" and row.duration_s == 2.0
    assert row.memory.peak() is None and row.params == {}
    assert PhaseRow.from_toml({"verdict": "pass"}) is None  # names no phase
    assert PhaseRow.from_toml("not a table") is None
    odd = PhaseRow.from_toml({"step": "load", "verdict": "maybe", "params": [1], "details": "x"})
    assert odd is not None and odd.verdict == "fail" and odd.params == {} and odd.details == {}
    rows = read_rows([old, {"verdict": "pass"}, {"step": "steady@mb1", "verdict": "fail"}])
    assert [r.verdict for r in newest_by_key(rows).values()] == ["fail"]


@given(st.dictionaries(st.text(max_size=12), st.one_of(st.none(), st.integers(), st.floats(), st.text())))
def test_no_row_dict_makes_reading_raise(data: dict) -> None:
    row = PhaseRow.from_toml(data)
    if row is not None:
        assert row.verdict in ("pass", "warn", "fail")
        row.memory.peak()
