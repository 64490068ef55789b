"""docs/architecture.md's worked example, proved: a new check is one function, and it reaches every
kind of campaign.

The check here is registered on `first_step` from this test module — nowhere in the package — and
it runs, in the real runner code, on a campaign of the pilot's own loop (the demo task) and on a
captured trainer's campaign (an unchanged user script): the same function, the same row fields,
without a line of `runner/` edited. It reads what every training offers (`Training.model`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from pilot_tui.analysis.checks import Check
from pilot_tui.core import phase_table
from pilot_tui.core.verdict import PASS, WARN
from pilot_tui.runner.phases.base import CHECKS, check

from .conftest import finished, run_in_process

ONLY = {"skip": [p for p in phase_table.names() if p not in ("load", "first_step")], "steady_updates": 3}


@pytest.fixture
def float_weights() -> Iterator[list[str]]:
    """A new check on the first update: warn when the trained weights are not float32 (say)."""
    seen: list[str] = []

    @check(on="first_step")
    def weights_dtype(ctx, run, outcome) -> Check | None:
        model = ctx.training.model(ctx, run.step.variant)
        if model is None:
            return None
        dtype = str(next(model.parameters()).dtype)
        seen.append(type(model).__name__)
        verdict = PASS if dtype == "torch.float32" else WARN
        return Check("weights_dtype", verdict, f"{type(model).__name__} trains in {dtype} (a test's check)")

    yield seen
    CHECKS["first_step"].remove(weights_dtype)


def first_step_row(record: dict) -> dict:
    return next(r for r in record["phases"] if r["step"] == "first_step")


def test_a_check_defined_here_reaches_the_pilots_loop_and_a_captured_trainer(
    float_weights: list[str], tiny, write_campaign, tmp_path: Path
) -> None:
    from pilot_tui.commands.headless import run_headless
    from pilot_tui.runner.in_process import InProcessLink
    from pilot_tui.session.driver import Session

    path = write_campaign({"phases": ONLY}, drop=("variants", "lr_board"))
    out = io.StringIO()
    rc = run_headless(Session(path, tmp_path / "records", link=InProcessLink()), out=out, err=out)
    task_run = finished(rc, out.getvalue(), "", tmp_path)
    trainer_run = run_in_process(
        tmp_path / "trainer",
        "plain_trainer.py",
        ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"],
        phases=ONLY,
    )
    for run, model in ((task_run, "TinyGPT"), (trainer_run, "LlamaForCausalLM")):
        row = first_step_row(run.record)
        (found,) = [c for c in row["details"]["gate_checks"] if c["name"] == "weights_dtype"]
        assert found["verdict"] == "pass" and model in found["message"], run.out
        assert row["verdict"] == "pass"
    assert float_weights == ["TinyGPT", "LlamaForCausalLM"]


def test_a_check_that_breaks_warns_and_the_body_keeps_its_row(write_campaign, tmp_path) -> None:
    from pilot_tui.core.spec import load_spec
    from pilot_tui.core.steps import Step
    from pilot_tui.runner.context import RunContext, pick_device
    from pilot_tui.runner.phases import execute
    from pilot_tui.tasks.loader import load_task

    @check(on="first_step")
    def broken(ctx, run, outcome) -> Check | None:
        raise ValueError("a bug in the check")

    try:
        loaded = load_spec(write_campaign(drop=("variants", "lr_board")))
        ctx = RunContext(loaded, load_task(loaded), pick_device("cpu"), lambda _m: None, tmp_path)
        row = execute(ctx, Step.of("first_step"), {})
    finally:
        CHECKS["first_step"].remove(broken)
    assert row["verdict"] == "warn" and "the check broken could not run: ValueError: a bug" in row["reason"]
    assert row["details"]["optimizer_state_mb"] > 0  # what the body measured is kept
