"""Record.read on files that are not records: one line naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot_tui.core.record import Record, RecordError


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "record not found"),
        (b"\xff\xfe not utf-8", "cannot read the record"),
        (b"x = [", "not a valid TOML record"),
        (b"x = 1\n", "not a pilot-tui record"),
    ],
    ids=["missing", "binary", "bad-toml", "not-a-record"],
)
def test_unreadable_records_name_the_file(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "r.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RecordError) as err:
        Record.read(path)
    assert str(err.value).startswith(f"{path}: {expected}") and "\n" not in str(err.value)


def test_a_folder_is_not_a_record(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="cannot read the record"):
        Record.read(tmp_path)


def test_a_record_read_back_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[campaign]\nid = "x"\n\n[[phases]]\nstep = "load"\n')
    record = Record.read(path)
    with pytest.raises(RecordError, match="read-only"):
        record.save()
    assert path.read_text().startswith("[campaign]")
