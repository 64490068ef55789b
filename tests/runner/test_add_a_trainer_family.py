"""docs/architecture.md's worked example, proved: a new family of trainings is one implementation
of `Training`, and every gate written once runs on it unchanged.

The family here — a user's own loop object, a model with a `step(batch)` method — is defined in
this test module, nowhere in the package. The real phase bodies (`load`, `inspect`, `first_step`)
and the real `execute` run on it: the shared body judges its weights after load, the shared scan
reads its examples, and a check registered on a phase reaches it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from pilot_tui.analysis.checks import Check
from pilot_tui.core.spec import load_spec
from pilot_tui.core.steps import Step
from pilot_tui.core.verdict import PASS
from pilot_tui.runner.checks.inspection import ModelOutput
from pilot_tui.runner.context import Outcome, PhaseRun, RunContext, pick_device
from pilot_tui.runner.phases import execute
from pilot_tui.runner.phases.base import CHECKS, check
from pilot_tui.runner.subject.base import InspectionInput, Loaded, Training
from pilot_tui.tasks.loader import load_task


class OwnLoop(Training):
    """A user's loop object: its own model, its own optimizer, one `step` per update."""

    def __init__(self, task) -> None:
        self.task = task
        self.net: torch.nn.Module | None = None
        self.opt: torch.optim.Optimizer | None = None

    def model(self, ctx: RunContext, variant: str) -> torch.nn.Module | None:
        return self.net

    def optimizer(self, ctx: RunContext, variant: str) -> Any:
        return self.opt

    def inspection(self, ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
        return InspectionInput(self.task, ctx.max_length, [], 2, ctx.splits, ModelOutput(None, "not probed"))

    def load(self, ctx: RunContext, run: PhaseRun) -> Loaded:
        torch.manual_seed(0)
        self.net = self.task.build_model()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        return Loaded(self.net, {"family": "own loop"}, "built by the user's loop object")

    def first_update(self, ctx: RunContext, run: PhaseRun) -> Outcome:
        batch = self.task.collate([self.task.examples[i] for i in ctx.splits["train"][:2]], ctx.max_length)
        logits = self.net(batch["input_ids"])
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100
        )
        loss.backward()
        self.opt.step()
        return Outcome(reason=f"first update loss {float(loss):.3g}", details={"loss": float(loss)})

    def _unused(self, *args: Any) -> Any:
        raise NotImplementedError("not piloted in this test")

    split_check = overfit = steady = eval_longest = save = export = final = resume = _unused
    lr_run = fit_lengths = estimate_source = _unused

    def fit_points(self, ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
        raise NotImplementedError


@pytest.fixture
def trained_params() -> list[int]:
    seen: list[int] = []

    @check(on="first_step")
    def counted(ctx, run, outcome) -> Check:
        seen.append(sum(p.numel() for p in ctx.training.model(ctx, "control").parameters()))
        return Check("counted", PASS, "parameters counted")

    yield seen
    CHECKS["first_step"].remove(counted)


def test_the_phase_bodies_run_on_a_family_defined_here(write_campaign, tmp_path, trained_params) -> None:
    loaded = load_spec(write_campaign(drop=("variants", "lr_board")))
    task = load_task(loaded)
    rows: list[dict[str, Any]] = []
    ctx = RunContext(loaded, task, pick_device("cpu"), lambda _msg: None, tmp_path, training=OwnLoop(task))
    for name in ("load", "inspect", "first_step"):
        rows.append(execute(ctx, Step.of(name, "control"), {}))
    load, inspect, first = rows
    assert load["verdict"] == "pass" and load["reason"] == "built by the user's loop object"
    # The shared body's figures on the family's own model, beside what the family said.
    assert load["details"]["family"] == "own loop" and load["details"]["trainable_parameters"] > 0
    assert inspect["details"]["kind"] == "causal_lm" and inspect["details"]["supervised_tokens"] > 0
    assert first["verdict"] == "pass" and first["details"]["loss"] > 0
    assert trained_params == [load["details"]["parameters"]]


def test_non_finite_weights_of_a_family_fail_load_in_the_shared_body(write_campaign, tmp_path) -> None:
    loaded = load_spec(write_campaign(drop=("variants", "lr_board")))
    task = load_task(loaded)
    family = OwnLoop(task)
    build = family.load

    def broken(ctx, run) -> Loaded:
        out = build(ctx, run)
        with torch.no_grad():
            next(out.model.parameters()).fill_(float("nan"))
        return out

    family.load = broken  # type: ignore[method-assign]
    ctx = RunContext(loaded, task, pick_device("cpu"), lambda _msg: None, tmp_path, training=family)
    row = execute(ctx, Step.of("load", "control"), {})
    assert row["verdict"] == "fail" and row["reason"].startswith("non-finite weights")
