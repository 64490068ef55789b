"""The engine end to end: the six engine phases through a real Session and runner process, a
phase that fails its gate, a runner killed mid-phase, a cancel, and the headless CLI's exit codes.

Everything is real: torch on CPU in a separate runner process, the record read back with tomllib.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import CAMPAIGNS, FAST, REPO, deep_merge, demo_raw

from pilot_tui.core.events import PhaseFinished, PhaseProgress, WireMessage
from pilot_tui.core.phase_table import in_group
from pilot_tui.session.driver import Session

STACK_PHASES, DATA_PHASES = in_group("stack"), in_group("data")
ENGINE_PHASES, CLOSING_PHASES = in_group("engine"), in_group("closing")

# The stack, data, LR and closing phases belong to other workstreams and are tested there; these
# tests pilot the six engine phases only (a full campaign takes ~10x longer), so they skip the rest.
NOT_ENGINE = [*STACK_PHASES, *DATA_PHASES, "lr_run", *CLOSING_PHASES]
PARAM_KEYS = ("microbatch", "accumulation", "effective_batch", "max_length", "precision", "device")
CPU_MEMORY_KEYS = ("baseline_rss_mb", "rss_mb", "peak_rss_mb")
# A steady phase far longer than any test: it only ends by a kill or a cancel.
ENDLESS = {"steady_updates": 1_000_000}
# Bounds a wait that should end in a second; if it does not, the guard cancels and the test fails.
GUARD_S = 60.0


def engine_campaign(folder: Path, changes: dict[str, Any] | None = None) -> Path:
    """The fast demo with the engine phases only (no variants, no LR board)."""
    raw = deep_merge(demo_raw(), FAST)
    raw = deep_merge(raw, {"phases": {"skip": NOT_ENGINE}})
    raw = deep_merge(raw, changes or {})
    for section in ("variants", "lr_board"):
        raw.pop(section, None)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def read_record(session: Session) -> dict[str, Any]:
    assert session.record is not None
    return tomllib.loads(session.record.path.read_text(encoding="utf-8"))


def finished_row(events: list[WireMessage]) -> dict[str, Any]:
    rows = [ev.row for ev in events if isinstance(ev, PhaseFinished)]
    assert len(rows) == 1, f"expected one finished row, got {len(rows)}"
    return rows[0]


def run_until_progress(session: Session, key: str, act) -> list[WireMessage]:
    """Run `key` with an endless steady phase; call `act()` at its first progress event."""
    guard = threading.Timer(GUARD_S, session.cancel)
    guard.daemon = True
    guard.start()
    events: list[WireMessage] = []
    acted = False
    try:
        for ev in session.run_step(key, ENDLESS):
            events.append(ev)
            if isinstance(ev, PhaseProgress) and not acted:
                acted = True
                act()
    finally:
        guard.cancel()
    assert acted, "the phase ended before its first progress event"
    return events


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[tuple[Session, dict[str, list[WireMessage]]]]:
    """One Session (one runner start) shared by the tests below: the six phases run once."""
    folder = tmp_path_factory.mktemp("engine")
    session = Session(engine_campaign(folder), folder / "records")
    session.start()
    events = {step.key: list(session.run_step(step.key)) for step in session.steps}
    yield session, events
    session.close()


def test_six_engine_rows_with_params_memory_duration_verdict(engine):
    session, events = engine
    assert [s.key for s in session.steps] == list(ENGINE_PHASES)
    data = read_record(session)
    rows = data["phases"][: len(ENGINE_PHASES)]  # later tests append rows
    assert [r["step"] for r in rows] == list(ENGINE_PHASES)
    for row in rows:
        # What the record keeps is exactly what the view was told.
        assert row == finished_row(events[row["step"]])
        p = row["params"]
        assert all(k in p for k in PARAM_KEYS), (row["step"], sorted(p))
        assert (p["microbatch"], p["accumulation"]) == (2, 2)
        assert p["effective_batch"] == p["microbatch"] * p["accumulation"] * p["replicas"] == 4
        assert p["max_length"] == 28 and p["precision"] == "fp32" and p["device"] == "cpu"
        m = row["memory"]
        assert all(m[k] > 0 for k in CPU_MEMORY_KEYS), (row["step"], m)
        # The high-water mark is reset at the phase start: it covers the baseline and the end.
        assert m["peak_rss_mb"] >= m["baseline_rss_mb"] and m["peak_rss_mb"] >= m["rss_mb"]
        assert not any("allocated" in k or "reserved" in k for k in m), "CUDA counters on CPU"
        assert row["duration_s"] > 0
        assert row["verdict"] in ("pass", "warn"), (row["step"], row["reason"])
        assert row["reason"] and row["started"]
    acc = data["accounting"]
    assert (acc["microbatch"], acc["accumulation"], acc["effective_batch"]) == (2, 2, 4)
    assert data["campaign"]["spec_sha256"] == hashlib.sha256(session.loaded.text.encode()).hexdigest()
    assert data["environment"]["device"] == "cpu"


def test_steady_figures_describe_the_timed_updates_only(engine):
    """Throughput and step time come from the same timed loop; the first update is not in it."""
    session, events = engine
    first, steady = finished_row(events["first_step"]), finished_row(events["steady"])
    d = steady["details"]
    n = d["updates"]
    # At least the declared count, then as many as the precision needed, each one's loss kept.
    assert n == d["timed_updates"] >= session.spec.phases.steady_updates and len(d["losses"]) == n
    assert d["timing_stopped"] in ("precision", "budget"), d["timing_stopped"]
    if d["timing_stopped"] == "precision":
        assert 0 < d["step_s_precision"] <= d["step_s_precision_target"]
    assert d["step_s_mean"] == d["step_time_s"] and d["step_s_ci95"] > 0
    # first_step ran, so no untimed update was added and every loss is a timed update's.
    assert not any("untimed first update" in note for note in d["notes"]), d["notes"]
    assert d["loss_first"] == d["losses"][0] and d["loss_last"] == d["losses"][-1]
    # examples/s × s/update = examples per update: both figures divide the same measured total.
    per_update = steady["params"]["effective_batch"]
    assert d["examples_per_s"] * d["step_time_s"] == pytest.approx(per_update, rel=1e-9)
    assert d["step_time_p10_s"] <= d["step_time_p50_s"] <= d["step_time_p90_s"]
    # What the loop shared the machine with, for the plan's busy-machine caveat.
    assert d["torch_threads"] >= 1 and d["cpu_count"] >= 1 and d["load_avg_1m"] >= 0
    # The per-update times sit inside the phase: their median cannot exceed the mean of the loop
    # by more than the whole loop, and the loop cannot be longer than the phase that ran it.
    assert 0 < d["step_time_p50_s"] <= n * d["step_time_s"] <= steady["duration_s"]
    assert first["details"]["loss"] != d["loss_first"]  # the first update was not timed again


def test_artifacts_hashes_match_their_files(engine):
    session, _ = engine
    artifacts = read_record(session)["artifacts"]
    assert sorted(a["kind"] for a in artifacts[:2]) == ["inference_weights", "training_checkpoint"]
    for a in artifacts:
        path = Path(a["path"])
        assert path.is_file() and path.parent == session.work_dir
        blob = path.read_bytes()
        assert a["size"] == len(blob)
        assert a["sha256"] == hashlib.sha256(blob).hexdigest()
    export = next(a for a in artifacts if a["kind"] == "inference_weights")
    assert export["path"].endswith(".safetensors") and export["phase"] == "export"
    # The write alone is timed for the plan's saves: inside the phase, which also reloads it.
    save = next(r for r in read_record(session)["phases"] if r["step"] == "save")
    assert 0 < save["details"]["save_s"] < save["duration_s"]


def test_a_rerun_save_never_overwrites_a_recorded_artifact(engine):
    session, _ = engine
    before = read_record(session)["artifacts"]
    row = finished_row(list(session.run_step("save")))
    assert row["verdict"] == "pass", row["reason"]
    artifacts = read_record(session)["artifacts"]
    assert len(artifacts) == len(before) + 1
    paths = [a["path"] for a in artifacts]
    assert len(set(paths)) == len(paths), paths  # same step, new file name
    for a in artifacts:  # every entry still describes the bytes on disk
        assert hashlib.sha256(Path(a["path"]).read_bytes()).hexdigest() == a["sha256"], a["path"]


def test_killed_runner_fails_the_row_and_the_next_step_runs_in_a_new_runner(engine):
    session, _ = engine
    first = session.runner_pid
    assert first is not None
    events = run_until_progress(session, "steady", lambda: os.kill(first, signal.SIGKILL))
    row = finished_row(events)
    assert row["verdict"] == "fail"
    assert "runner process died" in row["reason"] and "signal 9" in row["reason"]
    assert row["params"]["microbatch"] == 2  # the row still names the input
    assert read_record(session)["phases"][-1] == row  # on disk before the view saw it

    after = finished_row(list(session.run_step("eval_longest")))
    assert session.runner_pid not in (None, first)
    assert after["verdict"] == "pass", after["reason"]
    assert read_record(session)["phases"][-1]["step"] == "eval_longest"


def test_cancel_mid_phase_fails_the_row_and_keeps_the_runner(engine):
    session, _ = engine
    pid = session.runner_pid

    def cancel_from_another_thread() -> None:
        threading.Thread(target=session.cancel, name="test-cancel").start()

    row = finished_row(run_until_progress(session, "steady", cancel_from_another_thread))
    assert row["verdict"] == "fail"
    # Cooperative: the phase stopped by itself, the runner was not killed after the grace period.
    assert row["reason"] == "cancelled by the user"
    assert read_record(session)["phases"][-1] == row
    after = finished_row(list(session.run_step("export")))
    assert session.runner_pid == pid and after["verdict"] == "pass", after["reason"]


def test_a_cancel_while_idle_does_not_kill_the_next_step(engine, monkeypatch):
    session, _ = engine
    monkeypatch.setattr(session, "settings", dataclasses.replace(session.settings, cancel_grace_s=0.3))
    pid = session.runner_pid
    session.cancel()  # nothing in flight: e.g. a late key press after the phase ended
    # Longer than the grace period: a stale kill timer would fire in the middle of it.
    events = list(session.run_step("steady", {"steady_updates": 100}))
    row = finished_row(events)
    assert row["verdict"] != "fail", row["reason"]
    assert row["duration_s"] > 0.3
    assert session.runner_pid == pid


# ------------------------------------------------------------------------------ headless CLI


def run_cli(spec: Path, records: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(spec), "--headless", "--records", str(records)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )


def engine_copy(name: str, folder: Path) -> Path:
    """A shipped campaign with the non-engine phases skipped (see NOT_ENGINE), steady timed to its
    precision for at most a second (its 10 s budget is spent whole on a busy test machine)."""
    raw = tomllib.loads((CAMPAIGNS / name).read_text())
    raw.setdefault("phases", {})["skip"] = NOT_ENGINE
    raw["phases"]["steady_budget_s"] = 1.0
    if "file" in raw["task"]:
        raw["task"]["file"] = str(CAMPAIGNS / raw["task"]["file"])
    path = folder / name
    path.write_text(tomli_w.dumps(raw))
    return path


@pytest.mark.parametrize("name", ["example.toml", "demo-classify.toml"])
def test_cli_exit_0_on_the_shipped_campaigns(tmp_path, name):
    proc = run_cli(engine_copy(name, tmp_path), tmp_path / "records")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (record,) = (tmp_path / "records").glob("*.toml")
    rows = tomllib.loads(record.read_text())["phases"]
    assert {r["name"] for r in rows} == set(ENGINE_PHASES)
    assert all(r["verdict"] != "fail" for r in rows)
    # One printed line per phase, naming its step: "<mark> <verdict>  <step>  <duration> s ...".
    printed = [line.split()[2] for line in proc.stdout.splitlines() if line[:1] in "✓!✗"]
    assert printed == [r["step"] for r in rows]


def test_cli_exit_1_when_a_gate_fails_and_the_next_step_still_runs(tmp_path):
    spec = engine_campaign(tmp_path, {"limits": {"steady": {"memory_mb": 1}}})
    proc = run_cli(spec, tmp_path / "records")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (record,) = (tmp_path / "records").glob("*.toml")
    rows = {r["step"]: r for r in tomllib.loads(record.read_text())["phases"]}
    assert list(rows) == list(ENGINE_PHASES)
    steady = rows["steady"]
    assert steady["verdict"] == "fail"
    assert "peak RSS" in steady["reason"] and "over the declared ceiling 1 MiB" in steady["reason"]
    assert steady["details"]["input"]["microbatch"] == 2  # the row names the input
    assert all(rows[k]["verdict"] != "fail" for k in ("eval_longest", "save", "export"))
    assert "FAIL: 1 failed gate(s)" in proc.stdout


def test_cli_exit_2_on_bad_input_writes_nothing(tmp_path):
    spec = engine_campaign(tmp_path, {"batch": {"microbatch": 0}})
    proc = run_cli(spec, tmp_path / "records")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "batch.microbatch" in proc.stderr
    assert not (tmp_path / "records").exists()
