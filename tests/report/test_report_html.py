"""`pilot-tui report`: one HTML file, decision first, a curve per recorded run, nothing fetched,
and a hostile record's text shown as text."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from reading import Parsed, parse

from pilot_tui.commands.cli import main

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"
# Attributes that make a browser fetch or navigate.
URL_ATTRS = ("src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data", "background")
# Elements that run code or pull in another document.
ACTIVE = ("script", "link", "iframe", "object", "embed", "img", "base", "frame", "audio", "video", "form")
HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">"\'&'


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return tomllib.loads(RECORD.read_text())


def report(tmp_path: Path, data: dict[str, Any], *extra: str) -> tuple[str, Parsed]:
    src = tmp_path / "record.toml"
    src.write_text(tomli_w.dumps(data))
    out = tmp_path / "report.html"
    assert main(["report", str(src), "-o", str(out), *extra]) == 0
    text = out.read_text(encoding="utf-8")
    return text, parse(text)


def recorded_runs(data: dict[str, Any]) -> list[str]:
    """Every run whose curve the record keeps, read from the TOML here, not through the report."""
    phases = data["phases"]
    overfit = [
        p["step"] for p in phases if p["name"] == "overfit" and len(p["details"].get("loss_curve", [])) > 1
    ]
    lr = [r["id"] for r in data.get("runs", []) if len(r.get("losses", [])) > 1]
    steady = [p["step"] for p in phases if p["name"] == "steady" and len(p["details"].get("losses", [])) > 1]
    return overfit + lr + steady


def test_decision_first_then_every_part(tmp_path: Path, data) -> None:
    _, page = report(tmp_path, data, "--price-per-hour", "3")
    sections = [e.attrs["id"] for e in page.all("section")]
    assert sections[0] == "decision"
    assert sections == [
        "decision",
        "gates",
        "curves",
        "memory",
        "steps",
        "plan",
        "machine",
        "notes",
        "environment",
    ]
    text = " ".join(page.text)
    assert "rent with control" in text and "$216 for the 3-day package" in text
    # One row per recorded phase, with its verdict.
    assert len(page.all("span")) >= len(data["phases"])


def test_one_polyline_per_recorded_run(tmp_path: Path, data) -> None:
    _, page = report(tmp_path, data)
    drawn = [e.attrs["data-run"] for e in page.all("polyline")]
    expected = recorded_runs(data)
    assert len(expected) == 8  # overfit, three LR runs, four steady configurations
    assert drawn == expected
    # Each curve has its points (at least two), within the chart.
    for line in page.all("polyline"):
        points = line.attrs["points"].split()
        assert len(points) >= 2 and all(re.fullmatch(r"[\d.]+,[\d.]+", p) for p in points)


def test_a_run_added_to_the_record_gets_its_curve(tmp_path: Path, data) -> None:
    more = copy.deepcopy(data)
    extra = copy.deepcopy(more["runs"][0]) | {"id": "lr1e-4-s1-1", "seed": 1}
    more["runs"].append(extra)
    _, page = report(tmp_path, more)
    assert "lr1e-4-s1-1" in [e.attrs["data-run"] for e in page.all("polyline")]


def test_nothing_is_fetched_and_nothing_runs(tmp_path: Path, data) -> None:
    text, page = report(tmp_path, data)
    assert not [e.tag for e in page.elements if e.tag in ACTIVE]
    for e in page.elements:
        for name, value in e.attrs.items():
            assert name not in URL_ATTRS, (e.tag, name, value)
            assert not name.startswith("on"), (e.tag, name)
            assert "url(" not in value.lower()
    css = "".join(page.styles).lower()
    assert "@import" not in css and "url(" not in css and "@font-face" not in css
    assert not re.search(r"https?://", text)


def poison(data: dict[str, Any]) -> dict[str, Any]:
    """The hostile text in the strings a report shows: reasons, ids, notes, versions, the spec."""
    bad = copy.deepcopy(data)
    for row in bad["phases"]:
        row["reason"] = HOSTILE + row["reason"]
    bad["runs"][0]["id"] = HOSTILE
    bad["environment"]["torch"] = HOSTILE
    bad["campaign"]["created"] = HOSTILE
    bad["campaign"]["spec_text"] += f"\n# {HOSTILE}\n"
    bad["notes"] = [{"target": HOSTILE, "text": HOSTILE, "time": HOSTILE}]
    bad["conclusion"] = {"text": HOSTILE, "decision": HOSTILE, "time": ""}
    bad["board"]["decision"] = HOSTILE
    return bad


def test_a_hostile_record_stays_text(tmp_path: Path, data) -> None:
    text, page = report(tmp_path, poison(data))
    assert not page.all("script") and not page.all("img")
    assert not [(e.tag, k) for e in page.elements for k in e.attrs if k.startswith("on")]
    # Shown as written: the parser reads the hostile string back as text, many times over.
    assert "".join(page.text).count(HOSTILE) >= len(data["phases"])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # In an attribute, escaped too: the run's curve is still named by it.
    assert HOSTILE in [e.attrs.get("data-run") for e in page.all("polyline")]


def test_control_characters_are_made_visible(tmp_path: Path, data) -> None:
    bad = copy.deepcopy(data)
    bad["phases"][0]["reason"] = "ok\x1b[2J\x07\u202eevil"
    text, _ = report(tmp_path, bad)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "ok\\x1b[2J\\x07\\u202eevil" in text


def test_a_record_that_cannot_be_planned_still_reports(tmp_path: Path, data) -> None:
    bad = copy.deepcopy(data)
    bad["campaign"]["spec_text"] = "[batch]\nmicrobatch = 'many'\n"
    _, page = report(tmp_path, bad)
    assert page.all("section")[0].attrs["id"] == "decision"
    assert "No plan:" in " ".join(page.text)
    assert "plan" not in [e.attrs["id"] for e in page.all("section")]


def test_the_report_loads_neither_torch_nor_textual() -> None:
    """Made on a laptop from a record someone sent: no torch, no Textual, in a fresh interpreter."""
    code = (
        "import sys, pilot_tui.report, pilot_tui.commands.report; "
        "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_machine_check_has_its_section_and_its_text_stays_text(tmp_path: Path, data) -> None:
    with_machine = copy.deepcopy(data)
    with_machine["phases"].append(
        {
            "name": "machine",
            "step": "machine",
            "variant": "control",
            "verdict": "warn",
            "reason": "/dev/shm 64 MiB is smaller than the loader's need",
            "details": {
                "cpu_gemm_gflops": 101.5,
                "cpu_memory_gbps": 33.4,
                "cpu_note": "no peak to compare with on a CPU",
                "checks": [{"name": "shared_memory", "verdict": "warn", "message": HOSTILE}],
                "locations": [
                    {
                        "role": "checkpoints",
                        "path": "/ckpt",
                        "free_gib": 1.5,
                        "write_gbps": 0.3,
                        "need": "3 × 1 MiB",
                    }
                ],
            },
            "memory": {},
            "params": {},
        }
    )
    text, page = report(tmp_path, with_machine)
    section = next(e for e in page.all("section") if e.attrs["id"] == "machine")
    assert section is not None and "CPU: GEMM 101.5 GFLOP/s" in " ".join(page.text)
    assert "/dev/shm 64 MiB is smaller" in " ".join(page.text) and not page.all("script")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
