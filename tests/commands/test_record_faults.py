"""The records folder's faults end in one line, never a traceback, never an overwrite (R24).

No runner is started: `Session()` checks the folder before it would spawn one, and the record's
saves go through `Session._save`, the one place a write can fail (at start or mid-run).
"""

from __future__ import annotations

import errno
import os
import tomllib
from pathlib import Path

import pytest
from conftest import tmpfs

from pilot_tui.commands.cli import main
from pilot_tui.core.atomic import write_text_atomic
from pilot_tui.core.notes import add_note, set_conclusion
from pilot_tui.core.record import Record
from pilot_tui.session.driver import BadInputError, Session


def new_record(session: Session) -> Record:
    session.record = Record.create(
        session.records_dir,
        record_id=session.record_id,
        name=session.spec.campaign.name,
        spec_path=session.loaded.path,
        spec_text=session.loaded.text,
        spec_sha256=session.loaded.sha256,
        spec_raw=session.loaded.raw,
        environment={"device": "cpu"},
        accounting={},
        dataset={},
    )
    return session.record


def test_a_full_disk_at_start_or_mid_run_is_one_line(write_campaign, tmp_path, monkeypatch):
    records = tmp_path / "full"
    with tmpfs(records, "size=64k") as mounted:
        if mounted:
            (records / "filler").write_bytes(b"x" * 60_000)  # what is left is less than a record
        else:  # no mount here: the disk's answer, ENOSPC, injected where the write reaches it

            def full(fd: int) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            monkeypatch.setattr("pilot_tui.core.record.os.fsync", full)
        session = Session(write_campaign(), records)
        record = new_record(session)
        record.data["phases"].append({"step": "load", "reason": "y" * 100_000})
        with pytest.raises(BadInputError) as info:
            session._save()
        message = str(info.value)
        assert "disk full (no space left on the device)" in message and "\n" not in message
        assert not record.path.exists() and not list(records.glob(".*.tmp"))  # nothing half-written


def test_a_read_only_records_folder_is_refused_before_anything_runs(write_campaign, tmp_path):
    records = tmp_path / "ro"
    with tmpfs(records, "ro,size=64k") as mounted:
        if not mounted:
            records.chmod(0o555)
        try:
            target = records
            if os.access(records, os.W_OK):
                # Root without mount rights writes anything but a read-only file system: a
                # container's /sys is one (a records folder under it cannot be made either).
                target = Path("/sys/pilot-tui-records")
                if os.access("/sys", os.W_OK):
                    pytest.skip("no read-only folder available to this user")
            with pytest.raises(BadInputError, match="cannot be written"):
                Session(write_campaign(), target)
        finally:
            records.chmod(0o755) if not mounted else None


def test_records_pointing_at_a_file_and_a_300_character_name(write_campaign, tmp_path, capsys):
    a_file = tmp_path / "records.txt"
    a_file.write_text("not a folder")
    assert main(["run", str(write_campaign()), "--headless", "--records", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be a folder, and this is a file" in err
    spec = write_campaign({"campaign": {"name": "n" * 300}}, name="long.toml")
    assert main(["run", str(spec), "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "campaign.name: 300 characters; at most 100" in err
    assert not (tmp_path / "records").exists()


def test_record_files_are_created_exclusively(write_campaign, tmp_path):
    session = Session(write_campaign(), tmp_path / "records")
    other = Session(write_campaign(), tmp_path / "records")
    assert session.record_id != other.record_id and len(session.record_id.rsplit("-", 1)[1]) == 8
    other.record_id = session.record_id  # two sessions drawing the same id
    new_record(session)
    session._save()
    before = session.record.path.read_bytes()
    new_record(other).data["phases"].append({"step": "other"})
    with pytest.raises(BadInputError, match="exists already; not overwritten"):
        other._save()
    assert session.record.path.read_bytes() == before
    with pytest.raises(FileExistsError):
        write_text_atomic(session.record.path, "x", exclusive=True)


def test_a_note_on_a_live_sessions_record_is_kept_by_its_next_save(write_campaign, tmp_path):
    session = Session(write_campaign(), tmp_path / "records")
    record = new_record(session)
    session._save()
    add_note(record.path, "campaign", "seen from another shell")
    set_conclusion(record.path, "keep the control", decision="control")
    record.data["phases"].append({"name": "load", "step": "load", "verdict": "pass"})
    session._save()  # the live session's next save
    saved = tomllib.loads(record.path.read_text())
    assert [n["text"] for n in saved["notes"]] == ["seen from another shell"]
    assert saved["conclusion"]["decision"] == "control"
    assert saved["phases"][-1]["step"] == "load"
    session._save()  # and again: merged once, not duplicated
    assert len(tomllib.loads(record.path.read_text())["notes"]) == 1
