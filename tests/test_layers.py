"""The runner never loads Textual; the views never load torch. Checked in fresh interpreters.

Each side is imported module by module in a subprocess, so the failure names the first module
that pulled the forbidden package in (directly or through another import).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pilot_tui"
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
    assert "pilot_tui.runner.phases.steady" in names
    result = probe("textual", names)
    assert result["first"] == ""
    assert result["loaded"] == ["torch"]  # the probe does see what the modules load


def test_view_side_never_loads_torch():
    named = [
        "pilot_tui.session.driver",
        "pilot_tui.commands.cli",
        "pilot_tui.commands.headless",
        "pilot_tui.core.record",
        "pilot_tui.core.spec",
        "pilot_tui.core.steps",
        "pilot_tui.core.events",
        "pilot_tui.core.accounting",
    ]
    named.append("pilot_tui.tui.app")
    # Every other module outside runner/ and tasks/ is view-side or pure, and must stay so.
    names = named + [n for n in module_names(but=RUNNER_SIDE) if n not in named]
    result = probe("torch", names)
    assert result["first"] == ""
    assert result["loaded"] == ["textual"]


def test_the_layering_contracts_hold_statically():
    """import-linter's contracts in pyproject.toml: the layers (commands > tui | runner > session |
    tasks > analysis > core), torch and textual each on their side, no import cycles between
    sibling modules (deferred and type-checking imports counted). `lint-imports` reads them."""
    linter = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run(
        [str(linter), "--no-cache"], capture_output=True, text=True, timeout=120, cwd=PACKAGE.parent
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_the_package_root_holds_only_its_layers():
    """Every module lives in a layer package that one contract line covers: a module added at the
    root would be under no contract."""
    layers = {"core", "analysis", "session", "commands", "tui", "report", "runner", "tasks", "campaigns"}
    root = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    assert root - {"__init__", "__main__", "__pycache__"} <= layers


PURE_TESTS = ("core", "analysis")

PURE_PROBE = """
import importlib.util, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
loaded = []
for path in json.loads(sys.argv[2]):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("pilot_tui.runner"))))
"""


def test_pure_tests_import_neither_torch_nor_the_runner():
    """tests/core and tests/analysis test the pure layers: importing them (and the shared
    conftest) loads neither torch nor any runner module, so they stay fast and honest."""
    tests = PACKAGE.parent / "tests"
    files = [tests / "conftest.py"] + [p for d in PURE_TESTS for p in sorted((tests / d).glob("*.py"))]
    assert len(files) > 10
    out = subprocess.run(
        [sys.executable, "-c", PURE_PROBE, str(tests), json.dumps([str(f) for f in files])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_no_test_imports_a_private_name():
    """Tests use what the package offers; a private name is free to change."""
    import re

    private = re.compile(r"^\s*from pilot_tui[\w.]* import (?:\(([^)]*)\)|(.*)$)", re.M)
    found = []
    for path in (PACKAGE.parent / "tests").rglob("*.py"):
        for group in private.findall(path.read_text()):
            names = [n.split(" as ")[0].strip() for n in "".join(group).split(",")]
            found += [f"{path.name}: {n}" for n in names if n.startswith("_") and not n.startswith("__")]
    assert found == []


def deferred_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, text, says why) of every import inside a function of `path`.

    It says why when a comment is on the import's line, or on the line just above the block of
    imports it belongs to (one comment may cover a block)."""
    import ast

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found: dict[int, tuple[int, str, bool]] = {}
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in found:
                continue
            own = lines[node.lineno - 1 : node.end_lineno]
            i = node.lineno - 2
            while i >= 0 and (not lines[i].strip() or lines[i].lstrip().startswith(("import ", "from "))):
                i -= 1
            why = any("#" in line for line in own) or (i >= 0 and "#" in lines[i])
            found[node.lineno] = (node.lineno, lines[node.lineno - 1].strip(), why)
    return sorted(found.values())


def test_every_deferred_import_says_why():
    """An import inside a function hides a dependency from the reader and from the layer checks:
    each one says in a comment why it cannot sit at the top (torch after the spawn environment,
    an optional extra, seconds of import time for one path, …)."""
    silent = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text, why in deferred_imports(path)
        if not why
    ]
    assert not silent, "deferred imports that do not say why:\n" + "\n".join(silent)
