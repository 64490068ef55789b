"""One body per phase, whatever owns the training: the registry, and the shape of runner/.

Every phase of the table is registered by exactly one decorated body in the package; a second
registration is refused; no table of bodies by phase name exists beside the registry (a per-path
override is how two bodies of one phase drifted apart before); runner/ keeps its top level small,
and every module says in its first line what it owns.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import pilot_tui
import pilot_tui.runner
from pilot_tui.core import phase_table
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.phases import PHASES
from pilot_tui.runner.phases.base import phase

PACKAGE = Path(pilot_tui.__file__).parent
RUNNER = Path(pilot_tui.runner.__file__).parent


def registrations() -> Counter[str]:
    """Phase names registered by a decorator `@phase("name")` anywhere in the package."""
    found: Counter[str] = Counter()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and getattr(deco.func, "id", getattr(deco.func, "attr", "")) == "phase"
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                ):
                    found[deco.args[0].value] += 1
    return found


def test_every_phase_is_registered_by_exactly_one_body() -> None:
    found = registrations()
    assert set(found) == set(phase_table.names())
    assert {name: n for name, n in found.items() if n != 1} == {}
    assert set(PHASES) == set(phase_table.names())


def test_a_second_body_for_a_phase_is_refused() -> None:
    with pytest.raises(RuntimeError, match="one body per phase"):
        phase("load")(lambda ctx, run: None)
    assert PHASES["load"].__module__ == "pilot_tui.runner.phases.load"


def runner_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(RUNNER)], prefix="pilot_tui.runner."):
        names.append(info.name)
    return names


def test_no_table_of_bodies_beside_the_registry() -> None:
    """No module of the runner holds bodies by phase name for one kind of campaign (the captured
    trainer's included: the [trl] extra is installed in the test environment)."""
    assert "bodies" not in RunContext.__dataclass_fields__
    phases = set(phase_table.names())
    tables = []
    for name in runner_modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                isinstance(value, dict)
                and value is not PHASES
                and value
                and set(value) <= phases
                and all(isinstance(v, Callable) for v in value.values())
            ):
                tables.append(f"{name}.{attr}")
    assert tables == []


def test_runner_top_level_is_small_and_every_module_says_what_it_owns() -> None:
    top = sorted(p.name for p in RUNNER.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top
    silent = []
    for path in RUNNER.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not doc or not doc.splitlines()[0].strip():
            silent.append(str(path.relative_to(RUNNER)))
    assert silent == []
