"""The LR board with the real runner on CPU (R13, R14): runs, stop causes, same start, retries.

One session runs every LR of a small board (one of them deliberately divergent), a run at a
second seed, two refused runs and a retry; the tests below read what it left in the record.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.core.events import PhaseFinished, PhaseStarted, RecordUpdate, RunUpdate
from pilot_tui.core.hashing import sha256_file
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.session.driver import Session

UPDATES, EVERY, FACTOR = 30, 5, 4.0
CONTROL, GOOD, DIVERGENT = 1e-4, 3e-3, 10.0
BOARD = {
    "lr_board": {
        "control": CONTROL,
        "variants": [GOOD, DIVERGENT],
        "seeds": [0],
        "updates": UPDATES,
        "validate_every": EVERY,
        "stop": {"non_finite": True, "explosion_factor": FACTOR},
    }
}


def _campaign(folder: Path, changes: dict[str, Any]) -> Path:
    path = folder / "board.toml"
    path.write_text(tomli_w.dumps(deep_merge(deep_merge(demo_raw(), FAST), changes)))
    return path


def _drain(session: Session, key: str, overrides: dict[str, Any] | None = None) -> list:
    return list(session.run_step(key, overrides))


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lr_board")
    session = Session(_campaign(folder, BOARD), records_dir=folder / "records", link=InProcessLink())
    session.start()
    events: dict[str, list] = {}
    before_retry: list[dict[str, Any]] = []
    try:
        for step in session.steps:
            if step.phase == "lr_run":
                events[step.key] = _drain(session, step.key)
        # A second seed, not declared: seeds may be added; the name fixes lr and seed.
        events["seed1"] = _drain(session, "lr_run@lr1e-4-s1")
        # Refused before they start: another budget, another effective batch, an undeclared LR.
        events["budget"] = _drain(session, "lr_run@lr1e-4-s0", {"updates": UPDATES // 2})
        events["batch"] = _drain(session, "lr_run@lr1e-4-s0", {"microbatch": 3})
        events["undeclared"] = _drain(session, "lr_run@lr7e-4-s0")
        before_retry = copy.deepcopy(session.record.data["runs"])
        # A retry with another microbatch that keeps the effective batch: a new run, a new id.
        events["retry"] = _drain(session, "lr_run@lr1e-4-s0", {"microbatch": 1})
    finally:
        session.close()
    data = tomllib.loads(session.record.path.read_text())
    return {"session": session, "data": data, "events": events, "before_retry": before_retry}


def _runs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in data["runs"]}


def _same(a: Any, b: Any) -> bool:
    """Equal as written (NaN included: a diverged run's losses may hold one, and nan != nan)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _finished(events: list) -> dict[str, Any]:
    (row,) = [e.row for e in events if isinstance(e, PhaseFinished)]
    return row


def test_declared_runs_have_curves_validation_and_predictions(board):
    runs, data = _runs(board["data"]), board["data"]
    for run_id, lr in (("lr1e-4-s0-1", CONTROL), ("lr3e-3-s0-1", GOOD)):
        run = runs[run_id]
        assert (run["lr"], run["seed"], run["status"], run["stop_cause"]) == (lr, 0, "completed", "")
        assert len(run["losses"]) == run["updates_done"] == UPDATES
        assert [p["update"] for p in run["validation"]] == list(range(0, UPDATES + 1, EVERY))
        assert run["final_validation"] == run["validation"][-1]["loss"]
        assert run["best_validation"] == min(p["loss"] for p in run["validation"] if p["update"] > 0)
        assert run["spec_sha256"] == data["campaign"]["spec_sha256"]
        assert run["retry_of"] == ""
        preds = run["predictions"]
        path = Path(preds["path"])
        assert path.is_file() and preds["size"] == path.stat().st_size
        assert preds["sha256"] == sha256_file(path)
        saved = json.loads(path.read_text())
        assert saved["run_id"] == run_id
        assert [i["input"] for i in saved["items"]] == data["campaign"]["spec"]["replay"]["inputs"]
        assert any(a["path"] == preds["path"] for a in data["artifacts"])
    # The larger LR learned more in the same budget: the curves are the runs' own.
    assert runs["lr3e-3-s0-1"]["final_validation"] < runs["lr1e-4-s0-1"]["final_validation"]
    # The announced params and the row's params are the run's own LR and seed.
    (started,) = [e for e in board["events"]["lr_run@lr3e-3-s0"] if isinstance(e, PhaseStarted)]
    assert (started.params["lr"], started.params["seed"]) == (GOOD, 0)
    row = _finished(board["events"]["lr_run@lr3e-3-s0"])
    assert (row["params"]["lr"], row["params"]["total_updates"]) == (GOOD, UPDATES)
    verdicts = {r["step"]: r["verdict"] for r in data["phases"] if r["name"] == "lr_run"}
    assert verdicts["lr_run@lr1e-4-s0"] == verdicts["lr_run@lr3e-3-s0"] == "pass"


def _first_stop(losses: list[float], factor: float) -> tuple[int, str]:
    """The first update (1-based) where a declared condition holds in the run's own losses."""
    for update, loss in enumerate(losses, start=1):
        if not math.isfinite(loss):
            return update, "non_finite"
        if loss > factor * losses[0]:
            return update, "loss_explosion"
    return 0, ""


def test_divergent_lr_stops_at_the_right_step_and_keeps_its_row(board):
    run = _runs(board["data"])["lr1e1-s0-1"]
    step, cause = _first_stop(run["losses"], FACTOR)
    assert step > 0, "the divergent LR did not meet a declared stop condition"
    assert (run["status"], run["stop_cause"], run["stop_step"]) == ("diverged", cause, step)
    # It stopped right there: no update after the stop, and its final validation is taken there.
    assert run["updates_done"] == len(run["losses"]) == step
    assert run["validation"][-1]["update"] == step
    row = _finished(board["events"]["lr_run@lr1e1-s0"])
    assert row["verdict"] == "fail" and "diverged" in row["reason"]
    # The last live event carries the final status for the board.
    live = [e for e in board["events"]["lr_run@lr1e1-s0"] if isinstance(e, RunUpdate)]
    assert live[-1].status == "diverged" and live[-1].run_id == "lr1e1-s0-1"


def test_same_start_at_a_seed(board):
    runs = _runs(board["data"])
    at_seed0 = [runs[i] for i in ("lr1e-4-s0-1", "lr3e-3-s0-1", "lr1e1-s0-1", "lr1e-4-s0-2")]
    declared = at_seed0[:3]
    assert len({r["initial_weights_sha256"] for r in at_seed0}) == 1
    assert len({r["first_batches_sha256"] for r in at_seed0}) == 1
    # The first loss is measured before any optimizer step: bit-identical on CPU for every LR.
    assert len({r["losses"][0] for r in declared}) == 1
    # The retry sums the same examples in other microbatches: same value up to rounding.
    assert at_seed0[3]["losses"][0] == pytest.approx(declared[0]["losses"][0], rel=1e-6)
    # Same weights, same fixed validation batches: the point at update 0 is one value.
    assert len({r["validation"][0]["loss"] for r in at_seed0}) == 1
    # And the check can fail: another seed is another start.
    other = runs["lr1e-4-s1-1"]
    assert other["initial_weights_sha256"] != declared[0]["initial_weights_sha256"]
    assert other["first_batches_sha256"] != declared[0]["first_batches_sha256"]
    assert other["losses"][0] != declared[0]["losses"][0]


def test_refused_runs_say_why_and_use_no_id(board):
    reasons = {k: _finished(board["events"][k]) for k in ("budget", "batch", "undeclared")}
    assert all(r["verdict"] == "fail" and r["reason"].startswith("refused:") for r in reasons.values())
    assert "budget" in reasons["budget"]["reason"]
    assert "effective batch" in reasons["batch"]["reason"]
    assert "not declared" in reasons["undeclared"]["reason"]
    for key in ("budget", "batch", "undeclared"):
        assert not [e for e in board["events"][key] if isinstance(e, RecordUpdate) and e.section == "runs"]
    # The retry after three refusals is attempt 2: a refusal is not a run.
    assert "lr1e-4-s0-2" in _runs(board["data"])


def test_retry_is_a_new_run_and_the_old_row_stays(board):
    runs = _runs(board["data"])
    retry = runs["lr1e-4-s0-2"]
    assert retry["retry_of"] == "lr1e-4-s0-1" and retry["attempt"] == 2
    assert (retry["microbatch"], retry["accumulation"], retry["effective_batch"]) == (1, 4, 4)
    assert retry["status"] == "completed"
    # Every row written before the retry is still there, unchanged, in the same place.
    assert _same(board["data"]["runs"][: len(board["before_retry"])], board["before_retry"])
    ids = [r["id"] for r in board["data"]["runs"]]
    assert len(ids) == len(set(ids)) == 5


def test_live_updates_are_throttled_and_carry_every_validation(board):
    runs = _runs(board["data"])
    for key, run_id in (("lr_run@lr1e-4-s0", "lr1e-4-s0-1"), ("lr_run@lr3e-3-s0", "lr3e-3-s0-1")):
        live = [e for e in board["events"][key] if isinstance(e, RunUpdate)]
        assert {e.run_id for e in live} == {run_id}
        validated = [(e.update, e.validation) for e in live if e.validation is not None]
        assert validated == [(p["update"], p["loss"]) for p in runs[run_id]["validation"][1:]]
        # ≤ 10 a second beside the validations and the closing status.
        duration = runs[run_id]["duration_s"]
        assert len(live) <= len(validated) + 2 + duration / 0.1
        assert live[-1].status == "completed"


def test_board_section_compares_against_the_control(board):
    b = board["data"]["board"]
    rows = {r["lr"]: r for r in b["lrs"]}
    assert rows[CONTROL]["vs_control"] == "reference" and rows[CONTROL]["control"]
    assert rows[DIVERGENT]["vs_control"] == "diverged" and b["diverged"] == [DIVERGENT]
    # The retry is the control's latest measured attempt at seed 0: that is the one used.
    assert rows[CONTROL]["runs"] == ["lr1e-4-s0-2", "lr1e-4-s1-1"]
    # One seed in common with the control: a direction, never a winner.
    assert rows[GOOD]["seeds_compared"] == 1 and rows[GOOD]["reliable"] is False
    assert "winner" not in b and "stays the reference" in b["decision"]


def test_a_run_cannot_be_overwritten(board):
    session: Session = board["session"]
    record = session.record
    original = copy.deepcopy(record.data["runs"][0])
    forged = dict(original, status="completed", losses=[0.0], final_validation=0.0)
    session.apply_update(RecordUpdate(section="runs", value=forged))
    on_disk = tomllib.loads(record.path.read_text())["runs"]
    assert _same(on_disk[0], original)
    assert on_disk[-1]["id"] != original["id"] and on_disk[-1]["id_conflict"] == original["id"]
    assert len({r["id"] for r in on_disk}) == len(on_disk)
    with pytest.raises(ValueError):
        record.set_section("runs", [])


def test_plateau_cancelled_and_crashed_runs_keep_a_row(tmp_path):
    # A budget no test waits for: a run is certainly still going when it is stopped. Only the
    # plateau cause is armed for the LR of 10, whose validation never beats its start.
    stop = {"non_finite": False, "explosion_factor": 1e30, "plateau_validations": 1}
    changes = {"lr_board": {"updates": 100_000, "variants": [DIVERGENT], "stop": stop}}
    # A runner process: the crashed run below is the runner killed mid-run.
    session = Session(_campaign(tmp_path, deep_merge(BOARD, changes)), records_dir=tmp_path / "records")
    session.start()
    try:
        plateau_events = _drain(session, "lr_run@lr1e1-s0")
        asked = False
        for event in session.run_step("lr_run@lr1e-4-s0"):
            if isinstance(event, RunUpdate) and not asked:
                session.cancel()
                asked = True
        killed = False
        for event in session.run_step("lr_run@lr1e-4-s0"):
            if isinstance(event, RunUpdate) and not killed:
                os.kill(session.runner_pid, signal.SIGKILL)  # the runner dies mid-run
                killed = True
    finally:
        session.close()
    data = tomllib.loads(session.record.path.read_text())
    plateau, cancelled, crashed = data["runs"]
    points = plateau["validation"]
    first_without_new_best = next(
        p["update"] for i, p in enumerate(points) if i and not p["loss"] < min(q["loss"] for q in points[:i])
    )
    assert (plateau["status"], plateau["stop_cause"]) == ("stopped", "plateau")
    assert plateau["stop_step"] == first_without_new_best == plateau["updates_done"] == EVERY
    assert _finished(plateau_events)["verdict"] == "warn"
    assert (cancelled["id"], cancelled["status"]) == ("lr1e-4-s0-1", "cancelled")
    assert 0 < cancelled["updates_done"] == len(cancelled["losses"]) < 100_000
    assert (crashed["id"], crashed["status"], crashed["stop_cause"]) == (
        "lr1e-4-s0-2",
        "failed",
        "runner_died",
    )
    assert crashed["retry_of"] == "lr1e-4-s0-1" and crashed["lr"] == CONTROL
    assert [p["verdict"] for p in data["phases"]] == ["warn", "fail", "fail"]
