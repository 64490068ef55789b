"""Notes and the conclusion written into a saved record (R20): real files, read back with tomllib."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from pilot_tui.commands.cli import main
from pilot_tui.core.notes import add_note, note_targets, set_conclusion
from pilot_tui.core.record import RecordError, dumps


def saved_record(folder: Path) -> Path:
    data: dict[str, Any] = {
        "schema": 1,
        "campaign": {
            "name": "demo",
            "id": "20260101-000000-abcd",
            "spec": {"variants": [{"id": "mb1", "microbatch": 1}, {"id": "never_ran"}]},
        },
        "phases": [
            {"name": "steady", "step": "steady", "variant": "control", "verdict": "pass"},
            {"name": "steady", "step": "steady@mb1", "variant": "mb1", "verdict": "fail"},
            {"name": "lr_run", "step": "lr_run@lr1e-4-s0", "variant": "lr1e-4-s0", "verdict": "pass"},
        ],
        "runs": [{"id": "lr1e-4-s0-1", "lr": 1e-4, "seed": 0, "status": "completed"}],
    }
    path = folder / "demo-20260101-000000-abcd.toml"
    path.write_text(dumps(data))
    return path


def read(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def test_notes_append_on_every_kind_of_target(tmp_path: Path):
    path = saved_record(tmp_path)
    targets = ["campaign", "steady@mb1", "mb1", "never_ran", "lr1e-4-s0-1", "lr_run@lr1e-4-s0"]
    for i, target in enumerate(targets):
        add_note(path, target, f"observation {i}")
    notes = read(path)["notes"]
    assert [n["target"] for n in notes] == targets
    assert [n["text"] for n in notes] == [f"observation {i}" for i in range(len(targets))]
    assert all(n["time"] for n in notes)
    # the rest of the record is untouched
    assert read(path)["phases"][1]["verdict"] == "fail"


def test_a_note_on_an_unknown_target_is_refused_and_nothing_is_written(tmp_path: Path):
    path = saved_record(tmp_path)
    before = path.read_bytes()
    with pytest.raises(RecordError, match="'steady@nope'") as err:
        add_note(path, "steady@nope", "text")
    assert "\n" not in str(err.value)
    with pytest.raises(RecordError, match="needs some text"):
        add_note(path, "campaign", "   ")
    assert path.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_conclusion_is_set_and_a_later_one_replaces_it(tmp_path: Path):
    path = saved_record(tmp_path)
    set_conclusion(path, "control stays the best choice", decision="control")
    first = read(path)["conclusion"]
    assert (first["text"], first["decision"]) == ("control stays the best choice", "control")
    add_note(path, "mb1", "slower, same memory")
    set_conclusion(path, "rent 7 days for control then mb1", decision="control")
    data = read(path)
    assert data["conclusion"]["text"] == "rent 7 days for control then mb1"
    assert len(data["notes"]) == 1
    with pytest.raises(RecordError, match="needs some text"):
        set_conclusion(path, "")


def test_a_bad_record_is_refused(tmp_path: Path):
    with pytest.raises(RecordError, match="not found"):
        add_note(tmp_path / "missing.toml", "campaign", "x")
    other = tmp_path / "other.toml"
    other.write_text('title = "not a record"\n')
    with pytest.raises(RecordError, match="not a pilot-tui record"):
        set_conclusion(other, "x")
    assert other.read_text() == 'title = "not a record"\n'


def test_targets_name_what_they_are(tmp_path: Path):
    kinds = note_targets(read(saved_record(tmp_path)))
    assert kinds["campaign"] == "campaign"
    assert kinds["steady@mb1"] == "step"
    assert kinds["mb1"] == "variant"
    assert kinds["lr1e-4-s0-1"] == "run"


def test_cli_note_and_conclude_exit_codes(tmp_path: Path, capsys):
    path = saved_record(tmp_path)
    assert main(["note", str(path), "fine on CPU", "--on", "steady"]) == 0
    assert main(["note", str(path), "x", "--on", "ghost"]) == 2
    assert "ghost" in capsys.readouterr().err
    assert main(["conclude", str(path), "keep control", "--decision", "control"]) == 0
    data = read(path)
    assert [n["target"] for n in data["notes"]] == ["steady"]
    assert data["conclusion"]["decision"] == "control"


def test_a_live_record_gets_the_note_in_memory_and_on_disk(tmp_path: Path):
    from pilot_tui.core.record import Record

    path = saved_record(tmp_path)
    live = Record(path, read(path))  # what a running session holds
    add_note(live, "steady", "looks fine")
    set_conclusion(live, "keep control", "control")
    assert live.data["notes"][0]["text"] == "looks fine"
    live.save()  # the session's next save keeps them
    data = read(path)
    assert data["notes"][0]["target"] == "steady" and data["conclusion"]["text"] == "keep control"
