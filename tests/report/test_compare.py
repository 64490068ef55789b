"""`pilot-tui compare A B` prints only what differs — and, for two equal records, that they match;
`report A --against B` holds the same differences."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from reading import parse

from pilot_tui.commands.cli import main
from pilot_tui.report.compare import MATCH

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return tomllib.loads(RECORD.read_text())


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(tomli_w.dumps(data))
    return path


def changed_variant(data: dict[str, Any]) -> dict[str, Any]:
    """The same pilot with variant mb1 re-declared: accumulation 4 → 8, its steady step twice as
    slow and failing."""
    b = copy.deepcopy(data)
    (variant,) = [v for v in b["variants"] if v["id"] == "mb1"]
    variant["accumulation"] = 8
    (steady,) = [p for p in b["phases"] if p["step"] == "steady@mb1"]
    steady["verdict"] = "fail"
    steady["reason"] = "loss is not finite at update 3"
    steady["details"]["step_time_s"] *= 2
    return b


def compare(tmp_path: Path, a: dict[str, Any], b: dict[str, Any], capsys) -> tuple[int, list[str]]:
    code = main(["compare", str(write(tmp_path, "a.toml", a)), str(write(tmp_path, "b.toml", b))])
    return code, capsys.readouterr().out.splitlines()


def test_identical_records_print_that_they_match(tmp_path: Path, data, capsys) -> None:
    code, lines = compare(tmp_path, data, data, capsys)
    assert code == 0
    assert lines == [f"A = {tmp_path / 'a.toml'}", f"B = {tmp_path / 'b.toml'}", MATCH]


def test_a_changed_variant_prints_only_what_differs(tmp_path: Path, data, capsys) -> None:
    code, lines = compare(tmp_path, data, changed_variant(data), capsys)
    assert code == 1
    found = lines[2:]
    about = [(line[:12].strip(), line[13:].split(":", 1)[0]) for line in found]
    assert about == [
        ("verdict", "steady@mb1"),
        ("variant", "mb1.accumulation"),
        ("step time", "steady@mb1"),
        ("plan", "hours of work"),  # mb1 is no longer planned: the package holds less work
        ("plan", "configuration mb1"),
    ]
    assert found[0].endswith(
        "warn: loss did not fall over 4 updates (4.696 -> 4.855) → fail: loss is not finite at update 3"
    )
    assert found[1].endswith("mb1.accumulation: 4 → 8")
    assert found[2].endswith("(B/A 2.00×)")
    assert found[4].endswith("configuration mb1: passes → rejected")


def test_memory_and_step_time_within_the_tolerance_are_not_differences(tmp_path: Path, data, capsys) -> None:
    b = copy.deepcopy(data)
    for row in b["phases"]:
        if "peak_rss_mb" in row["memory"]:
            row["memory"]["peak_rss_mb"] *= 1.05
        if "step_time_s" in row["details"]:
            row["details"]["step_time_s"] *= 0.95
    code, lines = compare(tmp_path, data, b, capsys)
    assert (code, lines[2:]) == (0, [MATCH])


def test_environment_differences_are_named(tmp_path: Path, data, capsys) -> None:
    b = copy.deepcopy(data)
    b["environment"] |= {"torch": "2.9.1+cu128", "device": "cuda:0"}
    b["environment"]["libraries"] = {"transformers": "4.57.0"}
    _, lines = compare(tmp_path, data, b, capsys)
    assert "environment  torch: 2.13.0+cpu → 2.9.1+cu128" in lines
    assert "environment  device: cpu → cuda:0" in lines
    assert "environment  transformers: — → 4.57.0" in lines


def test_the_report_against_another_record_holds_the_same_differences(tmp_path: Path, data, capsys) -> None:
    _, lines = compare(tmp_path, data, changed_variant(data), capsys)
    out = tmp_path / "r.html"
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    assert main(["report", str(a), "-o", str(out), "--against", str(b)]) == 0
    page = parse(out.read_text())
    ids = [e.attrs["id"] for e in page.all("section")]
    assert ids[:2] == ["decision", "compare"]
    rows = len(page.all("tr")) - len(page.all("thead"))  # body rows of every table
    assert rows >= len(lines) - 2
    assert "mb1.accumulation" in " ".join(page.text)
