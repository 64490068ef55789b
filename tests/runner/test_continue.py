"""A dropped SSH connection does not cost the campaign (R24): SIGHUP to the headless view
cancels the step in flight (its row is kept), and `pilot-tui continue RECORD` runs what is left
into the same record — refused once the campaign file changed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from conftest import REPO

from pilot_tui.commands.cli import main
from pilot_tui.core import phase_table

STEPS = ("steady",)


def rows(record: Path) -> list[dict]:
    try:
        return tomllib.loads(record.read_text())["phases"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return []


def test_sighup_then_continue_into_the_same_record(write_campaign, tmp_path: Path, capsys) -> None:
    skip = [n for n in phase_table.names() if n != "steady"]  # new phases need no edit here
    spec = write_campaign(
        {
            "phases": {"steady_updates": 100_000, "skip": skip},
            "limits": {"steady": {"time_s": 5}},  # room for the SIGHUP to cancel it on a loaded machine
        },
        drop=("variants", "lr_board"),
    )
    records = tmp_path / "records"
    cli = subprocess.Popen(
        [sys.executable, "-m", "pilot_tui", "run", str(spec), "--headless", "--records", str(records)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(records.glob("*.toml")):  # the record appears once the campaign is open
            assert time.monotonic() < deadline and cli.poll() is None, "the campaign never opened"
            time.sleep(0.1)
        # steady is starting or under way: a cancel asked before its phase starts is sent again then
        time.sleep(0.5)
        cli.send_signal(signal.SIGHUP)  # the SSH connection dropped
        assert cli.wait(timeout=60) == 128 + signal.SIGHUP
    finally:
        if cli.poll() is None:
            cli.kill()
    (record,) = records.glob("*.toml")
    first = rows(record)
    assert [r["step"] for r in first] == list(STEPS)
    assert first[-1]["reason"].startswith("cancelled"), first[-1]["reason"]
    # Continue: only the interrupted step runs again, into the same file, with the same id.
    code = main(["continue", str(record)])
    assert code == 1  # steady stops at its 2 s deadline: a failed gate, recorded
    after = rows(record)
    assert after[: len(first)] == first
    assert [r["step"] for r in after[len(first) :]] == ["steady"]
    assert after[-1]["reason"].startswith("hung: still running at its time_s ceiling of 5 s")
    assert sorted(p.name for p in records.glob("*.toml")) == [record.name]
    capsys.readouterr()
    # A campaign file changed since: refused in one line, the record untouched.
    spec.write_text(spec.read_text().replace("steady_updates = 100000", "steady_updates = 5"))
    before = record.read_bytes()
    assert main(["continue", str(record)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the campaign file changed since record" in err
    assert record.read_bytes() == before
