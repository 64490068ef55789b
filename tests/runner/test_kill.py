"""SIGKILL the headless CLI at random moments of a run: the record on disk stays whole.

After each kill: the record, if it exists, parses; it holds every phase whose line the CLI had
printed (the CLI prints a line only once the record holding it is on disk); no runner process
survives. A writer killed between its temp file and the rename leaves the temp file behind; the
next start sweeps it, which a final complete run in the same records folder checks.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import subprocess
import sys
import threading
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
# One kill at a random moment of each window of a run (start-up, each engine phase, the closing
# plan), so every phase kind is hit: in two phases, drawn at random, SIGKILL to the CLI alone (the
# runner must die by PR_SET_PDEATHSIG); elsewhere to the CLI's whole process group (CLI + runner).
WINDOWS = 1 + len(ENGINE_PHASES) + 1
LONE_KILLS = 2
GROUP_KILLS = WINDOWS - LONE_KILLS
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


def is_mark(line: str) -> bool:
    """The header (the record is open) or a phase line: where one window ends and the next begins."""
    return line.startswith("pilot-tui · campaign") or bool(PHASE_LINE.match(line))


class Watched:
    """A CLI run whose stdout is read as it comes, with the moment of each mark line."""

    def __init__(self, cli: subprocess.Popen[str]) -> None:
        self.cli, self.lines, self.marks = cli, [], []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.cli.stdout is not None
        for line in self.cli.stdout:
            self.lines.append(line)
            if is_mark(line):
                self.marks.append(time.monotonic())

    def output(self) -> str:
        self.reader.join(timeout=30)
        return "".join(self.lines)


def measured_windows(spec: Path, records: Path) -> list[float]:
    """One complete run, timed line by line: the length of its start-up (until the record is
    open), of each engine phase (from one phase line to the next) and of the closing plan."""
    t0 = time.monotonic()
    run = Watched(start_cli(spec, records, "measure", stderr=subprocess.STDOUT))
    assert run.cli.wait(timeout=120) == 0, run.output()
    out, marks = run.output(), [t0, *run.marks, time.monotonic()]
    assert sum(bool(PHASE_LINE.match(line)) for line in out.splitlines()) == len(ENGINE_PHASES), out
    return [b - a for a, b in itertools.pairwise(marks)]


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_a_whole_record(tmp_path):
    spec = tiny_campaign(tmp_path)
    records = tmp_path / "records"

    # Measure one complete run, then kill each later run at a random moment of one of its windows,
    # counted from the line that opens the window in that run (start-up varies on a shared machine).
    lengths = measured_windows(spec, tmp_path / "measure")
    assert len(lengths) == WINDOWS, lengths
    rng = random.Random(SEED)
    kills = WINDOWS
    # The CLI alone once the runner exists: inside phases (windows 1 .. len(ENGINE_PHASES)).
    lone_windows = set(rng.sample(range(1, 1 + len(ENGINE_PHASES)), LONE_KILLS))
    plan = [(window, rng.random(), window in lone_windows) for window in range(WINDOWS)]
    landed, missed, left_temp, printed_total = {False: 0, True: 0}, 0, 0, 0
    while plan:
        window, fraction, lone = plan.pop(0)
        moment = fraction * lengths[window]
        token = f"{os.getpid()}-{len(plan)}-{missed}"
        before = set(records.glob("*.toml"))
        temps_before = set(temp_files(records))
        run = Watched(start_cli(spec, records, token, stderr=subprocess.DEVNULL))
        cli, started = run.cli, time.monotonic()
        # The window opens at the start, or at its `window`-th mark line (the header, a phase).
        wait_until(lambda r=run, w=window: r.cli.poll() is not None or len(r.marks) >= w, 120)
        deadline = (run.marks[window - 1] if window and len(run.marks) >= window else started) + moment
        wait_until(lambda c=cli, d=deadline: c.poll() is not None or time.monotonic() >= d, moment + 5)
        if cli.poll() is None:
            if lone:  # the header is out: the runner exists, and must die by PR_SET_PDEATHSIG
                os.kill(cli.pid, signal.SIGKILL)
            else:
                os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(timeout=30)
        out = run.output()
        if cli.returncode == 0:
            # The window ended before the moment (the machine is shared): try it again, earlier.
            missed += 1
            assert missed <= kills, "the runs keep finishing before the kill"
            plan.append((window, rng.random() * fraction, lone))
            continue
        assert cli.returncode == -signal.SIGKILL, (cli.returncode, out)
        landed[lone] += 1

        # No runner survives, whether killed with the group or by the parent-death signal.
        assert wait_until(lambda t=token: not runners_with(t), REAP_S), f"{token}: a runner survived"

        printed = [m.group(2) for line in out.splitlines() if (m := PHASE_LINE.match(line))]
        # A kill inside a phase window came after every earlier phase's line.
        assert len(printed) >= max(0, window - 1), (window, printed)
        printed_total += len(printed)
        new = set(records.glob("*.toml")) - before
        assert len(new) <= 1
        if printed:
            assert new, f"kill in window {window}: phases printed but no record"
        if new:
            text = new.pop().read_text(encoding="utf-8")
            assert text.strip(), f"kill in window {window}: empty record"
            data = tomllib.loads(text)  # a torn file would not parse
            assert data["campaign"]["name"] == "demo" and "accounting" in data
            recorded = [row["step"] for row in data["phases"]]
            # Every printed phase is on disk, in order; at most one more was saved unprinted.
            assert recorded[: len(printed)] == printed, (window, printed, recorded)
            assert len(recorded) - len(printed) <= 1
            assert set(recorded) <= set(ENGINE_PHASES)
        left_temp += bool(set(temp_files(records)) - temps_before)

    assert landed == {False: GROUP_KILLS, True: LONE_KILLS}
    assert printed_total > 0, "no kill landed after a phase was recorded"
    print(
        f"\n{kills} kills mid-run ({GROUP_KILLS} process group, {LONE_KILLS} CLI only) over the "
        f"windows of a {sum(lengths):.2f} s run, {missed} retried (the window ended first): "
        f"{printed_total} printed phases found on disk; {left_temp} kills left a temp file before "
        "the next start's sweep"
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
