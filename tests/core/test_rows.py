"""rows.py: every record written so far reads through one typed view (pure, no torch)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
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


def test_the_one_row_writer_reads_back_as_written_and_a_cancel_is_a_flag() -> None:
    from pilot_tui.core.rows import phase_row
    from pilot_tui.core.verdict import CANCELLED_BY_USER, FAIL, PASS, Verdict

    kw = dict(params={"microbatch": 2}, memory={"peak_rss_mb": 10.0}, details={"n": 1})
    passed = phase_row(name="steady", step="steady@bf16", variant="bf16", verdict=PASS, reason="", **kw)
    # Bare words on disk, the keys in one order, "all checks passed" for a pass without a reason.
    assert type(passed["verdict"]) is str and list(passed)[:5] == [
        "name",
        "step",
        "variant",
        "verdict",
        "reason",
    ]
    assert passed["reason"] == "all checks passed" and "started" not in passed and "cancelled" not in passed
    row = PhaseRow.from_toml(tomllib.loads(tomli_w.dumps(passed)))
    assert row is not None and row.verdict is Verdict.PASS and row.key == "steady@bf16" and not row.cancelled
    assert row.memory.peak() == 10.0 and row.params == {"microbatch": 2} and row.ranks == ()
    stopped = phase_row(
        name="steady",
        step="steady#2",
        variant="control",
        verdict=FAIL,
        reason=CANCELLED_BY_USER,
        cancelled=True,
        ranks=[{"rank": 0, "verdict": "fail", "peak_rss_mb": 5.0}],
        **kw,
    )
    row = PhaseRow.from_toml(stopped)
    assert row.cancelled and row.recorded_key == "steady#2" and row.key == "steady"
    assert row.ranks[0].rank == 0 and row.ranks[0].verdict is FAIL and row.ranks[0].memory.peak() == 5.0
    # A record written before the flag: the reason alone says it.
    old = {k: v for k, v in stopped.items() if k != "cancelled"}
    assert PhaseRow.from_toml(old).cancelled
    assert not PhaseRow.from_toml(old | {"reason": "out of memory in steady"}).cancelled


def test_verdicts_read_strictly_and_the_worst_wins() -> None:
    from pilot_tui.core.verdict import FAIL, PASS, WARN, Verdict, worst

    assert [Verdict.read(v) for v in ("pass", "warn", "fail", "PASS", None, 1)] == [PASS, WARN] + [FAIL] * 4
    assert worst([PASS, "warn"]) is WARN and worst([]) is FAIL and PASS.ok and not FAIL.ok


def test_a_run_row_reads_mistyped_fields_as_absent_and_keeps_a_live_curve_by_reference() -> None:
    from pilot_tui.core.rows import RunRow, read_runs

    losses = [2.0, 1.5]
    run = RunRow.from_toml(
        {
            "id": "lr1e-4-s0-1",
            "lr": 1e-4,
            "seed": 0,
            "status": "completed",
            "final_validation": 1.2,
            "best_validation": "1.1",
            "stop_step": 3.5,
            "losses": losses,
            "validation": [{"update": 6, "loss": 1.3}, {"loss": "x"}],
        }
    )
    assert run is not None and (run.lr, run.seed, run.status) == (1e-4, 0, "completed")
    assert run.best_validation is None and run.stop_step is None and run.metric("final_validation") == 1.2
    assert run.validation_points() == [(6.0, 1.3)]
    losses.append(1.0)
    assert run.losses[-1] == 1.0  # a live run's curve is not copied
    assert read_runs([{"id": "a"}, "not a table", run]) == [RunRow(id="a"), run]
