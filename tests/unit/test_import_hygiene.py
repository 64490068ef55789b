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
RUNNER_SIDE = ("runner", "tasks")  # own torch (in the runner process)

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
    if (PACKAGE / "tui" / "app.py").is_file():
        named.append("pilot_tui.tui.app")
    # Every other module outside runner/ and tasks/ is view-side or pure, and must stay so.
    names = named + [n for n in module_names(but=RUNNER_SIDE) if n not in named]
    result = probe("torch", names)
    assert result["first"] == ""
    if "pilot_tui.tui.app" in named:
        assert result["loaded"] == ["textual"]
