"""The LR board's runs in forks of a small CPU runner (`runner/phases/lr_run_beside.py`): a run
trained in a fork beside its neighbour, or beside the data checks and the estimate, is the run
the runner trains in place, bit for bit; a run asked otherwise is trained in place; any other step
waits for a fork still training."""

from __future__ import annotations

import json
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import torch
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.events import PhaseFinished, RecordUpdate, RunUpdate
from pilot_tui.core.steps import campaign_steps
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.runner.machine.host import available_cores
from pilot_tui.runner.phases import execute, lr_run_beside
from pilot_tui.runner.subject.task import TaskTraining
from pilot_tui.session.driver import Session

pytestmark = pytest.mark.skipif(available_cores() < 2, reason="a fork beside the runner needs a second core")

BOARD = {
    "lr_board": {
        "control": 1e-4,
        "variants": [3e-3, 10.0],  # the last one diverges: a run stopped early pairs as well
        "seeds": [0],
        "updates": 24,
        "validate_every": 6,
        "stop": {"non_finite": True, "explosion_factor": 4.0},
    }
}


@pytest.fixture
def one_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The runner's thread count on a 2-core machine (one core left for the view), and a
    temporary folder of this test's own, where the forks stage their runs' files."""
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(lr_run_beside.tempfile, "tempdir", str(staging))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield staging
    torch.set_num_threads(before)


def _campaign(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "board.toml"
    path.write_text(tomli_w.dumps(deep_merge(deep_merge(demo_raw(), FAST), BOARD)))
    return path


def _board(
    folder: Path, asked: dict[str, dict[str, Any]] | None = None, before: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict]:
    """The steps `before`, then every LR run of the board in campaign order, in one session in
    process (`asked`: a run's overrides)."""
    session = Session(_campaign(folder), records_dir=folder / "records", link=InProcessLink())
    session.start()
    events: dict[str, list] = {}
    try:
        for key in before:
            events[key] = list(session.run_step(key))
        for step in session.steps:
            if step.phase == "lr_run":
                events[step.key] = list(session.run_step(step.key, (asked or {}).get(step.key)))
    finally:
        session.close()
    return tomllib.loads(session.record.path.read_text()), events


def _row(events: list) -> dict[str, Any]:
    return next(e.row for e in events if isinstance(e, PhaseFinished))


def _measured(run: dict[str, Any]) -> dict[str, Any]:
    """What a run trained: everything but when it started and how long it took."""
    predictions = json.loads(Path(run["predictions"]["path"]).read_text())
    return {k: v for k, v in run.items() if k not in ("started", "duration_s", "predictions")} | {
        "predicted": predictions["items"]
    }


def test_a_run_trained_beside_its_neighbour_is_the_run_trained_in_place(
    tmp_path: Path, one_thread: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paired, events = _board(tmp_path / "pairs")
    forked = [k for k, ev in events.items() if "trained" in _row(ev)["details"]]
    # lr1e-4 in place with lr3e-3 beside it, then lr1e1 in place: one run came from a fork.
    assert forked == ["lr_run@lr3e-3-s0"], forked
    details = _row(events[forked[0]])["details"]
    assert details["beside"] == ["lr_run@lr1e-4-s0"] and details["fork_s"] > 0
    # Its live curve reached the view as the run's own: every validation, then its last status.
    live = [e for e in events[forked[0]] if isinstance(e, RunUpdate)]
    assert [e.update for e in live if e.validation is not None] == [6, 12, 18, 24]
    assert live[-1].status == "completed"

    # The data checks: the board's first run trains in a fork from the first of them on, the
    # estimate's fork starts at its own step beside it, the board's step takes the run.
    early, events_early = _board(tmp_path / "early", before=("inspect", "estimate"))
    said = {k: _row(ev)["details"].get("beside") for k, ev in events_early.items()}
    computed = _row(events_early["estimate"])["details"]["computed"]
    assert computed.startswith("in a fork of the runner started at this step"), computed
    # It names every untimed step it trained beside: the estimate too, if still training then.
    # Where it ended before the estimate, the board's second run trains beside the estimate
    # instead; else the third trains beside the second, which the runner trains.
    assert said["lr_run@lr1e-4-s0"] in (["inspect"], ["inspect", "estimate"]), said
    assert (said["lr_run@lr3e-3-s0"], said["lr_run@lr1e1-s0"]) in (
        (["estimate"], None),
        (None, ["lr_run@lr3e-3-s0"]),
    ), said

    monkeypatch.setattr(TaskTraining, "board_runs_beside", False)
    alone, events_alone = _board(tmp_path / "alone")
    assert not any("trained" in _row(ev)["details"] for ev in events_alone.values())

    runs = {r["id"]: _measured(r) for r in paired["runs"]}
    assert runs == {r["id"]: _measured(r) for r in alone["runs"]}
    assert runs == {r["id"]: _measured(r) for r in early["runs"]}
    assert {r["status"] for r in paired["runs"]} == {"completed", "diverged"}
    # The forked run's predictions sit in the records' folder like the others, nothing staged left.
    (run,) = [r for r in paired["runs"] if r["id"] == "lr3e-3-s0-1"]
    assert Path(run["predictions"]["path"]).parent == next((tmp_path / "pairs" / "records").glob("*/runs"))
    assert not list(one_thread.glob("pilot-lr-beside-*"))  # nothing staged left


def test_a_run_asked_with_other_overrides_is_trained_in_place(tmp_path: Path, one_thread: Path) -> None:
    # The fork beside the first run trained the second as declared; the session asks it with
    # another split of the same effective batch: that run is trained here, the fork's dropped.
    other = {"microbatch": 1, "accumulation": 4}
    data, events = _board(tmp_path, {"lr_run@lr3e-3-s0": other})
    assert [("trained" in _row(ev)["details"]) for ev in events.values()] == [False, False, False]
    (run,) = [r for r in data["runs"] if r["id"] == "lr3e-3-s0-1"]
    assert (run["microbatch"], run["accumulation"]) == (1, 4)
    assert not list(one_thread.glob("pilot-lr-beside-*"))  # nothing staged left


def test_any_other_step_waits_for_a_fork_still_training(fast_demo_ctx: Any, one_thread: Path) -> None:
    ctx = fast_demo_ctx
    ctx.training = TaskTraining()
    steps = {s.key: s for s in campaign_steps(ctx.spec)}
    board = [k for k in steps if k.startswith("lr_run@")]
    assert len(board) >= 2
    lr_run_beside.lr_runs_in_pairs(ctx, steps[board[0]])
    twins = ctx.memo[lr_run_beside.TWINS_KEY]
    (twin,) = twins.values()
    assert twin.call.running and twin.plan.run_id.startswith(steps[board[1]].variant)
    assert twin.staging.parent == one_thread  # where the other tests look for what is left
    # The run the fork trains keeps its id for the step that takes it.
    assert not ctx.memo.get("lr_run_ids")
    lr_run_beside.lr_runs_in_pairs(ctx, steps["steady"])
    assert not twin.call.running and twin.call.wait()["events"]  # ended, its run kept for its step
    # A cancel while a step waits stops the fork instead: the run is trained in place if asked.
    lr_run_beside.lr_runs_in_pairs(ctx, steps[board[0]])
    (late,) = [t for t in twins.values() if t is not twin]
    ctx.cancel.set()
    try:
        lr_run_beside.lr_runs_in_pairs(ctx, steps["steady"])
    finally:
        ctx.cancel.clear()
    assert not late.call.running and late not in twins.values() and not late.staging.exists()


def test_a_cancel_while_a_step_waits_for_its_fork_keeps_the_runs_row(
    fast_demo_ctx: Any, one_thread: Path
) -> None:
    ctx = fast_demo_ctx
    ctx.training = TaskTraining()
    ctx.memo.pop(lr_run_beside.TWINS_KEY, None)
    steps = {s.key: s for s in campaign_steps(ctx.spec)}
    first, second = [k for k in steps if k.startswith("lr_run@")][:2]
    lr_run_beside.lr_runs_in_pairs(ctx, steps[first])
    twin = ctx.memo[lr_run_beside.TWINS_KEY][second]
    sent: list = []
    emit, ctx.emit = ctx.emit, sent.append
    cancel = threading.Timer(0.05, ctx.cancel.set)  # after the step began (it clears the flag)
    cancel.start()
    try:
        row = execute(ctx, steps[second], {"attempt": 1, "retry_of": ""})
    finally:
        cancel.cancel()
        ctx.emit = emit
        ctx.cancel.clear()
    assert row["verdict"] == "fail" and not twin.call.running
    (kept,) = [m.value for m in sent if isinstance(m, RecordUpdate) and m.section == "runs"]
    assert kept["status"] == "cancelled" and kept["id"] == twin.plan.run_id
