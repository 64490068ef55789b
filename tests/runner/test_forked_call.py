"""A function run in a fork of the runner (runner/processes/forked_call.py), and the estimate that
computes in one beside the data checks (runner/phases/estimate.py)."""

from __future__ import annotations

import os
import random
import sys
from dataclasses import replace
from typing import Any

import pytest
import torch

from pilot_tui.core.steps import Step
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.phases import execute
from pilot_tui.runner.phases.estimate import BACKGROUND_KEY
from pilot_tui.runner.processes.forked_call import ForkedCall, ForkedCallFailed
from pilot_tui.runner.subject.task import TaskTraining

PLANTED = {"value": "runner"}


def _plant_and_draw() -> dict:
    PLANTED["value"] = "child"
    torch.manual_seed(123)
    random.seed(123)
    print("a line on the child's stdout")
    return {"drawn": torch.rand(1).item(), "planted": PLANTED["value"]}


def test_a_forked_call_returns_its_value_and_nothing_it_changed_reaches_the_runner(capfd) -> None:
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    call = ForkedCall(_plant_and_draw)
    out = call.wait()
    assert out["planted"] == "child" and 0 <= out["drawn"] < 1
    # The child's globals, seeds and stdout stayed in the child.
    assert PLANTED["value"] == "runner"
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == py_state
    assert "a line on the child's stdout" not in capfd.readouterr().out
    assert call.seconds is not None and call.seconds > 0
    with pytest.raises(ChildProcessError):  # reaped already: no zombie left behind
        os.waitpid(call.pid, os.WNOHANG)


def _boom() -> None:
    raise ValueError("boom in the child")


def _sleep() -> None:
    import time

    time.sleep(30)


def test_a_forked_call_that_raises_or_is_killed_says_so() -> None:
    with pytest.raises(ForkedCallFailed, match="ValueError: boom in the child"):
        ForkedCall(_boom).wait()
    call = ForkedCall(_sleep)
    assert call.running
    call.kill()
    assert not call.running
    with pytest.raises(ForkedCallFailed, match="stopped"):
        call.wait()


def test_a_child_nobody_waits_for_is_reaped_when_it_ends() -> None:
    call = ForkedCall(lambda: 1)
    while call.running:
        call._done.wait(0.05)
    with pytest.raises(ChildProcessError):
        os.waitpid(call.pid, os.WNOHANG)


# ------------------------------------------------------------------ the estimate beside the data checks


@pytest.fixture(scope="module")
def ctx(fast_demo_ctx: RunContext) -> RunContext:
    return fast_demo_ctx


@pytest.fixture
def one_thread():
    """The runner's torch threads leave a core idle (runner/main.leave_a_core_for_the_view): the
    fork needs it. A test process uses every core unless told."""
    if (os.cpu_count() or 1) < 2 or not sys.platform.startswith("linux"):
        pytest.skip("the estimate forks only beside a runner that leaves a core idle (Linux, ≥ 2 cores)")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def board_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate takes the fork beside the data checks where the LR board trains in turn (a
    captured trainer's); on the pilot's own loop the board's first run takes it and the estimate
    forks at its own step (tests/runner/test_lr_run_beside.py)."""
    monkeypatch.setattr(TaskTraining, "board_runs_beside", False)


def _fresh(ctx: RunContext) -> RunContext:
    return replace(ctx, memo={}, rows=[], states={}, parked=set(), training=None)


def _after_inspect(ctx: RunContext) -> tuple[RunContext, Any]:
    """A fresh context whose `inspect` ran: the estimate's fork started beside it."""
    local = _fresh(ctx)
    execute(local, Step("inspect", "inspect"), {})
    return local, local.memo[BACKGROUND_KEY]


def _figures(row: dict) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "seconds"} for e in row["details"]["estimates"]]


def test_the_estimate_forked_beside_the_data_checks_finds_the_figures_it_finds_in_place(
    ctx: RunContext,
    one_thread,
) -> None:
    forked = _fresh(ctx)
    for phase in ("inspect", "split", "overfit"):
        assert execute(forked, Step(phase, phase), {})["verdict"] != "fail"
    row = execute(forked, Step("estimate", "estimate"), {})
    assert row["verdict"] == "pass", row["reason"]
    said = row["details"]["computed"]
    assert said.startswith("in a fork of the runner beside inspect · split · overfit"), said
    assert row["details"]["beside"] == ["inspect", "split", "overfit"] and row["details"]["fork_s"] > 0
    in_place = execute(_fresh(ctx), Step("estimate", "estimate"), {})
    assert "computed" not in in_place["details"]
    assert _figures(row) == _figures(in_place)
    assert BACKGROUND_KEY not in forked.memo  # taken: a later estimate computes again


def test_a_step_outside_the_data_checks_waits_for_the_fork_to_end_first(
    ctx: RunContext,
    one_thread,
) -> None:
    local, background = _after_inspect(ctx)
    execute(local, Step("stack", "stack"), {})  # not a data check: it runs once the fork ended
    assert not background.call.running
    row = execute(local, Step("estimate", "estimate"), {})
    assert row["details"]["beside"] == ["inspect"]


def test_an_estimate_asked_for_another_machine_than_the_forks_computes_in_place(
    ctx: RunContext,
    one_thread,
) -> None:
    local, background = _after_inspect(ctx)
    row = execute(local, Step("estimate", "estimate"), {"gpus": 2, "strategy": "ddp"})
    assert row["verdict"] == "pass", row["reason"]
    assert "computed" not in row["details"] and row["details"]["target"]["gpus"] == 2
    assert not background.call.running


def test_no_fork_where_the_runner_uses_every_core(ctx: RunContext) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(max(before, os.cpu_count() or 1))
    try:
        local = _fresh(ctx)
        execute(local, Step("inspect", "inspect"), {})
        assert BACKGROUND_KEY not in local.memo
    finally:
        torch.set_num_threads(before)


def test_cancelling_the_estimate_while_it_waits_for_the_fork_stops_the_fork(
    ctx: RunContext,
    one_thread,
) -> None:
    import threading

    local, background = _after_inspect(ctx)
    assert background.call.running  # the fake runs take about a second here: the step will wait
    threading.Timer(0.05, local.cancel.set).start()  # execute() clears the flag as the step starts
    row = execute(local, Step("estimate", "estimate"), {})
    assert row["verdict"] == "fail" and row.get("cancelled"), row["reason"]
    assert not background.call.running
    with pytest.raises(ForkedCallFailed, match="stopped"):
        background.call.wait()
