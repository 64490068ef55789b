"""SIGKILL the headless CLI at random moments of a run: the record on disk stays whole.

After each kill: the record, if it exists, parses; it holds every phase whose line the CLI had
printed (the CLI prints a line only once the record holding it is on disk); no runner process
survives. A writer killed between its temp file and the rename leaves the temp file behind; the
next start sweeps it, which a final complete run in the same records folder checks.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest
import tomli_w
from conftest import FAST, REPO, deep_merge, demo_raw

from pilot_tui.core.phase_table import in_group

STACK_PHASES, DATA_PHASES = in_group("stack"), in_group("data")
ENGINE_PHASES, CLOSING_PHASES = in_group("engine"), in_group("closing")

SEED = 20_240_611
# SIGKILL to the CLI's whole process group (CLI + runner): one at a random moment of each window
# of a measured run (start-up, each engine phase, the closing plan), so every phase kind is hit.
GROUP_KILLS = 1 + len(ENGINE_PHASES) + 1
LONE_KILLS = 2  # SIGKILL to the CLI alone, inside a phase: the runner must die by PR_SET_PDEATHSIG
MARKER = "PILOT_TEST_KILL_MARKER"  # not PILOT_TUI_*: those are settings
# A phase line: "<mark> <verdict>  <step> ...", e.g. "✓ pass  first_step   0.03 s ...".
PHASE_LINE = re.compile(r"^\S (pass|warn|fail)\s+(\S+)\s")
REAP_S = 10.0


def tiny_campaign(folder: Path) -> Path:
    # Engine phases only: the others belong to other workstreams (see test_engine.NOT_ENGINE).
    raw = deep_merge(demo_raw(), FAST)
    raw["phases"]["skip"] = [*STACK_PHASES, *DATA_PHASES, "lr_run", *CLOSING_PHASES]
    # The minimum of steady updates, timed no longer: what a kill finds is the same, each run shorter.
    raw["phases"]["steady_budget_s"] = 0.0
    for section in ("variants", "lr_board"):
        raw.pop(section, None)
    path = folder / "tiny.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def start_cli(spec: Path, records: Path, token: str, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    # The marker travels to the runner through the environment, so this test finds its own
    # runners among those of other tests running at the same time.
    env = dict(os.environ, **{MARKER: token})
    return subprocess.Popen(
        [sys.executable, "-m", "pilot_tui", "run", str(spec), "--headless", "--records", str(records)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )


def runners_with(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if "pilot_tui.runner.main" not in " ".join(p.info["cmdline"] or []):
                continue
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue  # dead, waiting for its reaper
            if p.environ().get(MARKER) == token:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_until(condition, timeout: float) -> bool:
    """The one bounded wait of this file: poll a condition, never sleep a fixed duration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def temp_files(records: Path) -> list[Path]:
    return sorted(records.rglob(".*.tmp")) if records.exists() else []


def measured_windows(spec: Path, records: Path) -> list[tuple[float, float]]:
    """One complete run, timed line by line: (start, end) of its start-up (until the record is
    open), of each engine phase (between two phase lines) and of the closing plan."""
    t0 = time.monotonic()
    full = start_cli(spec, records, "measure", stderr=subprocess.STDOUT)
    assert full.stdout is not None
    lines, marks = [], []
    for line in full.stdout:
        lines.append(line)
        if line.startswith("pilot-tui · campaign") or PHASE_LINE.match(line):
            marks.append(time.monotonic() - t0)
    assert full.wait(timeout=120) == 0, "".join(lines)
    marks.append(time.monotonic() - t0)
    assert sum(bool(PHASE_LINE.match(line)) for line in lines) == len(ENGINE_PHASES), "".join(lines)
    return list(zip([0.0, *marks[:-1]], marks, strict=True))


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_a_whole_record(tmp_path):
    spec = tiny_campaign(tmp_path)
    records = tmp_path / "records"

    # Measure one complete run: a kill at a random moment of each of its windows.
    windows = measured_windows(spec, tmp_path / "measure")
    assert len(windows) == GROUP_KILLS, windows
    duration = windows[-1][1]
    rng = random.Random(SEED)
    kills = GROUP_KILLS + LONE_KILLS
    plan = [(start + rng.random() * (end - start), False) for start, end in windows]
    # The CLI alone, once the runner exists: inside phases (windows 1 .. len(ENGINE_PHASES)).
    for i in rng.sample(range(1, 1 + len(ENGINE_PHASES)), LONE_KILLS):
        start, end = windows[i]
        plan.append((start + rng.random() * (end - start), True))
    landed, missed, left_temp, printed_total = {False: 0, True: 0}, 0, 0, 0
    while plan:
        moment, lone = plan.pop(0)
        token = f"{os.getpid()}-{len(plan)}-{missed}"
        before = set(records.glob("*.toml"))
        temps_before = set(temp_files(records))
        started = time.monotonic()
        cli = start_cli(spec, records, token)
        if lone:  # only meaningful once the runner exists
            wait_until(lambda c=cli, t=token: c.poll() is not None or bool(runners_with(t)), 60)
        deadline = started + moment
        wait_until(lambda c=cli, d=deadline: c.poll() is not None or time.monotonic() >= d, moment + 5)
        if cli.poll() is not None:
            # The run was faster than the measured one (the machine is shared): try again earlier.
            cli.communicate()
            missed += 1
            assert missed <= kills, "the runs keep finishing before the kill"
            plan.append((rng.random() * 0.9 * (time.monotonic() - started), lone))
            continue
        if lone:
            os.kill(cli.pid, signal.SIGKILL)
        else:
            os.killpg(cli.pid, signal.SIGKILL)
        out, _ = cli.communicate(timeout=30)
        if cli.returncode == 0:
            # It finished between the poll above and the kill: nothing was killed, try earlier.
            missed += 1
            assert missed <= kills, "the runs keep finishing before the kill"
            plan.append((rng.random() * 0.9 * (time.monotonic() - started), lone))
            continue
        assert cli.returncode == -signal.SIGKILL
        landed[lone] += 1

        # No runner survives, whether killed with the group or by the parent-death signal.
        assert wait_until(lambda t=token: not runners_with(t), REAP_S), f"{token}: a runner survived"

        printed = [m.group(2) for line in out.splitlines() if (m := PHASE_LINE.match(line))]
        printed_total += len(printed)
        new = set(records.glob("*.toml")) - before
        assert len(new) <= 1
        if printed:
            assert new, f"kill at {moment:.2f} s: phases printed but no record"
        if new:
            text = new.pop().read_text(encoding="utf-8")
            assert text.strip(), f"kill at {moment:.2f} s: empty record"
            data = tomllib.loads(text)  # a torn file would not parse
            assert data["campaign"]["name"] == "demo" and "accounting" in data
            recorded = [row["step"] for row in data["phases"]]
            # Every printed phase is on disk, in order; at most one more was saved unprinted.
            assert recorded[: len(printed)] == printed, (moment, printed, recorded)
            assert len(recorded) - len(printed) <= 1
            assert set(recorded) <= set(ENGINE_PHASES)
        left_temp += bool(set(temp_files(records)) - temps_before)

    assert landed == {False: GROUP_KILLS, True: LONE_KILLS}
    assert printed_total > 0, "no kill landed after a phase was recorded"
    print(
        f"\n{kills} kills mid-run ({GROUP_KILLS} process group, {LONE_KILLS} CLI only) over a "
        f"{duration:.2f} s run, {missed} retried (the run ended first): {printed_total} printed "
        f"phases found on disk; {left_temp} kills left a temp file before the next start's sweep"
    )

    # A complete run in the same folder: its start sweeps every temp file the kills left.
    final = start_cli(spec, records, "final")
    out, err = final.communicate(timeout=120)
    assert final.returncode == 0, out + err
    assert temp_files(records) == []


def test_sweep_removes_only_temp_files_of_dead_writers(tmp_path):
    # The random kills rarely land inside a write (it lasts milliseconds): this makes the leftovers.
    from pilot_tui.core.atomic import sweep_stale_temp_files

    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(done.stdout)  # exited and reaped: no such process any more
    art = tmp_path / "demo.v2-20240101-000000-ab12"
    art.mkdir()
    stale = [
        tmp_path / f".demo.v2-20240101-000000-ab12.toml.{dead}.k3j_x9q1.tmp",  # dots and digits in the name
        art / f".checkpoint-control-step5.pt.{dead}.abcd1234.tmp",  # the runner's checkpoint writer
    ]
    kept = [
        tmp_path / f".demo-1.toml.{os.getpid()}.zzzz.tmp",  # a live writer (this process)
        tmp_path / ".notes.tmp",  # not named like ours
        tmp_path / "demo-1.toml",
    ]
    for path in stale + kept:
        path.write_text("x")
    assert sorted(sweep_stale_temp_files(tmp_path)) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
