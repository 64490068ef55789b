"""The stack phase for real (imports, precisions, attention kernels) and a real campaign ending in its plan."""

from __future__ import annotations

import importlib.metadata
import io
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
import torch
from conftest import FAST, deep_merge, demo_raw

from pilot_tui.commands.headless import run_headless
from pilot_tui.commands.plan import print_plan
from pilot_tui.core.phase_table import in_group
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.runner.phases.stack import check_attention, check_extension, check_precision
from pilot_tui.session.driver import Session

MISSING = "definitely_not_a_module_xyz"


def test_extensions_are_imported_for_real():
    missing = check_extension(MISSING)
    assert not missing["ok"] and "ModuleNotFoundError" in missing["error"]
    present = check_extension("tomli_w")
    assert present["ok"] and present["version"] == importlib.metadata.version("tomli_w")


def test_precisions_and_attention_backends_are_tried_on_the_device():
    cpu = torch.device("cpu")
    assert check_precision(cpu, "fp32")["ok"]
    backends = {a["backend"]: a for a in check_attention(cpu, "fp32")}
    assert set(backends) == {"flash", "memory_efficient", "cudnn", "math"}
    assert backends["math"]["status"] == "usable"
    # CUDA-only kernels are "not applicable" on CPU, never reported as usable or broken.
    assert backends["memory_efficient"]["status"] == "not_applicable"
    assert backends["cudnn"]["status"] == "not_applicable"


def campaign(folder: Path, requires: list[str], skip: tuple[str, ...] = ()) -> Path:
    """The fast demo: stack + engine phases only, no variants, no LR board."""
    raw = deep_merge(demo_raw(), FAST)
    raw = deep_merge(
        raw,
        {
            "task": {"requires": requires},
            "phases": {"skip": [*in_group("data"), "lr_run", *in_group("closing"), *skip]},
            "plan": {"priority": ["control"], "dataset_size": 50_000, "epochs": 1},
        },
    )
    for section in ("variants", "lr_board"):
        raw.pop(section, None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def run(
    folder: Path, requires: list[str], skip: tuple[str, ...] = (), keep_going: bool = False
) -> tuple[int, str, dict[str, Any], Path]:
    session = Session(campaign(folder, requires, skip), folder / "records", link=InProcessLink())
    out = io.StringIO()
    code = run_headless(session, out=out, err=io.StringIO(), keep_going=keep_going)
    assert session.record is not None
    return code, out.getvalue(), tomllib.loads(session.record.path.read_text()), session.record.path


def test_an_extension_that_does_not_import_fails_the_stack_and_nothing_is_kept(tmp_path: Path, capsys):
    code, out, data, path = run(
        tmp_path / "bad", [MISSING, "tomli_w"], skip=("save", "export"), keep_going=True
    )
    assert code == 1
    stack = data["phases"][0]
    assert stack["step"] == "stack" and stack["verdict"] == "fail"
    assert MISSING in stack["reason"]
    exts = {e["name"]: e for e in stack["details"]["extensions"]}
    assert not exts[MISSING]["ok"] and exts["tomli_w"]["ok"] and exts["tomli_w"]["version"]
    # The engine phases still ran and passed: memory alone does not keep a configuration.
    assert all(r["verdict"] != "fail" for r in data["phases"][1:])
    sheet = data["plan"]["sheet"]
    assert sheet["kept"] == "" and sheet["stack_status"] == "fail"
    assert data["plan"]["package"]["order"] == []
    assert "plan: no configuration kept" in out
    assert print_plan(path) == 1
    assert MISSING in capsys.readouterr().out


def test_a_failed_stack_stops_the_headless_campaign(tmp_path: Path):
    code, out, data, _ = run(tmp_path / "stop", [MISSING])
    assert code == 1
    assert [r["step"] for r in data["phases"]] == ["stack"]
    assert "later phases not run" in out
    assert data["plan"]["sheet"]["kept"] == ""


def test_a_passing_campaign_keeps_the_control_and_plans_it(tmp_path: Path):
    code, out, data, _ = run(tmp_path / "good", ["tomli_w"])
    assert code == 0, out
    stack = data["phases"][0]
    assert stack["verdict"] == "pass" and stack["details"]["torch"] == torch.__version__
    assert stack["details"]["device"] == "cpu" and stack["details"]["gpus"] == []
    sheet, package = data["plan"]["sheet"], data["plan"]["package"]
    assert sheet["kept"] == "control" and sheet["stack_status"] == "pass"
    assert "RSS" in sheet["memory_basis"]
    peak = max(
        r["memory"]["peak_rss_mb"]
        for r in data["phases"]
        if r["name"] not in ("stack", "estimate", "machine")
    )
    assert sheet["peak_mb"] == round(peak, 1)
    (planned,) = package["order"]
    steady = next(r for r in data["phases"] if r["step"] == "steady")
    assert planned["step_time_s"] == steady["details"]["step_time_s"]
    assert planned["updates"] == 50_000 // data["accounting"]["effective_batch"]
    assert package["days"] in (3, 7, 30) or "does not fit" in package["summary"]
    assert any("measured on the CPU" in a for a in package["assumptions"])
    assert "plan: kept control" in out
