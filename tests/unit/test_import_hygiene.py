"""The runner never loads Textual; the views never load torch. Checked in fresh interpreters.

Each side is imported module by module in a subprocess, so the failure names the first module
that pulled the forbidden package in (directly or through another import).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "pilot_tui"
# Own torch (in the runner process); campaigns/ holds the shipped example task file.
RUNNER_SIDE = ("runner", "tasks", "campaigns")

PROBE = """
import importlib, json, sys
forbidden, names = sys.argv[1], json.loads(sys.argv[2])
first = ""
for name in names:
    importlib.import_module(name)
    if forbidden in sys.modules:
        first = name
        break
print(json.dumps({"first": first, "loaded": sorted(m for m in ("torch", "textual") if m in sys.modules)}))
"""


def module_names(only: tuple[str, ...] = (), but: tuple[str, ...] = ()) -> list[str]:
    """Modules of the package found on disk (listing them imports nothing)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            parts = parts[:-1]
        top = parts[0] if parts else ""
        if (only and top not in only) or (but and top in but):
            continue
        names.append(".".join(("pilot_tui", *parts)))
    return names


def probe(forbidden: str, names: list[str]) -> dict:
    """Import `names` in order in a fresh interpreter: the first that loads `forbidden`, and
    which of torch / textual ended up loaded."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, forbidden, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_runner_side_never_loads_textual():
    names = ["pilot_tui.runner.main", "pilot_tui.runner.phases", *module_names(only=RUNNER_SIDE)]
    assert "pilot_tui.runner.phases.train_steps" in names
    result = probe("textual", names)
    assert result["first"] == ""
    assert result["loaded"] == ["torch"]  # the probe does see what the modules load


def test_view_side_never_loads_torch():
    named = [
        "pilot_tui.session",
        "pilot_tui.cli",
        "pilot_tui.headless",
        "pilot_tui.record",
        "pilot_tui.spec",
        "pilot_tui.steps",
        "pilot_tui.events",
        "pilot_tui.accounting",
    ]
    named.append("pilot_tui.tui.app")
    # Every other module outside runner/ and tasks/ is view-side or pure, and must stay so.
    names = named + [n for n in module_names(but=RUNNER_SIDE) if n not in named]
    result = probe("torch", names)
    assert result["first"] == ""
    assert result["loaded"] == ["textual"]


def test_the_layering_contracts_hold_statically():
    """import-linter's contracts in pyproject.toml: core modules import neither the runner nor the
    dashboard (nor torch, nor textual); the dashboard never imports torch; the runner never
    imports textual; no import cycles between sibling modules. `lint-imports` reads them."""
    linter = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run(
        [str(linter), "--no-cache"], capture_output=True, text=True, timeout=120, cwd=PACKAGE.parent
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_every_top_level_module_is_under_a_core_contract():
    """A new core module that no contract names would be unchecked: each top-level module is
    either a runner-side package, the dashboard, the entry point, or listed as core."""
    import tomllib

    contracts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    core = set(contracts[0]["source_modules"])
    outer = {"pilot_tui.runner", "pilot_tui.tasks", "pilot_tui.tui", "pilot_tui.cli", "pilot_tui"}
    # `init` is an entry point like cli (its own contract); campaigns/ ships the example task file.
    outer |= {"pilot_tui.init_campaign", "pilot_tui.campaigns"}
    tops = {".".join(n.split(".")[:2]) for n in module_names()}
    assert tops - core - outer == set(), "add the new module to the first contract in pyproject.toml"
