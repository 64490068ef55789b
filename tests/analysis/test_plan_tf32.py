"""The plan says when fp32 steps were timed on a GPU with TF32 off."""

from __future__ import annotations

from pilot_tui.analysis.plan import Environment, compute_plan, tf32_note
from pilot_tui.core.rows import PhaseRow

FP32_STEADY = PhaseRow.from_toml({"name": "steady", "step": "steady", "params": {"precision": "fp32"}})
BF16_STEADY = PhaseRow.from_toml({"name": "steady", "step": "steady@bf16", "params": {"precision": "bf16"}})


def test_fp32_steps_timed_without_tf32_are_named() -> None:
    note = tf32_note(Environment(device="cuda:0", tf32_matmul=False), [FP32_STEADY, BF16_STEADY])
    assert note is not None and "TF32 off" in note and "steady" in note and "steady@bf16" not in note


def test_no_note_with_tf32_on_on_cpu_or_without_fp32_steps() -> None:
    assert tf32_note(Environment(device="cuda:0", tf32_matmul=True), [FP32_STEADY]) is None
    assert tf32_note(Environment(device="cpu", tf32_matmul=False), [FP32_STEADY]) is None
    assert tf32_note(Environment(device="cuda:0", tf32_matmul=False), [BF16_STEADY]) is None
    # A record made before the key existed says nothing either way: no note.
    assert tf32_note(Environment(device="cuda:0"), [FP32_STEADY]) is None


def test_a_whole_cuda_record_with_tf32_off_plans_with_the_note() -> None:
    """Through compute_plan, as the plan reads its rows (typed), not only the function alone."""
    import tomllib
    from pathlib import Path

    record = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"
    data = tomllib.loads(record.read_text())
    data["environment"] |= {"device": "cuda:0", "tf32_matmul": False}
    assumptions = compute_plan(data).package.assumptions
    assert any("TF32 off" in a and "first_step" in a for a in assumptions)
