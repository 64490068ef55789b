"""Find and build a campaign's task: a built-in demo or a function in a user's Python file."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.reasons import exception_line, first_line
from ..core.spec import LoadedSpec
from .contract import KINDS, Task
from .hf_data import DataError

BUILTINS = {
    "instruct": "pilot_tui.tasks.demo_instruct",
    "classify": "pilot_tui.tasks.demo_classify",
    "hf_causal_lm": "pilot_tui.tasks.hf_causal_lm",
    "hf_sequence_classification": "pilot_tui.tasks.hf_sequence_classification",
}


class TaskError(Exception):
    """The task cannot be built; one line naming the file and the exception (exit 2)."""


def _user_frame(exc: BaseException, file: Path) -> str:
    # Point at the line of the user's file where it broke, not at our loader.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == file]
    return f" (line {frames[-1].lineno})" if frames else ""


def _factory(loaded: LoadedSpec) -> tuple[Callable[..., Any], str]:
    t = loaded.spec.task
    if t.builtin:
        if t.builtin not in BUILTINS:
            raise TaskError(
                f"{loaded.path}: task.builtin: unknown built-in task {t.builtin!r} "
                f"(known: {', '.join(BUILTINS)})"
            )
        return importlib.import_module(BUILTINS[t.builtin]).make_task, f"built-in {t.builtin}"
    file = loaded.resolve(t.file)
    if not file.is_file():
        raise TaskError(f"{loaded.path}: task.file: no such file {t.file!r}")
    # `from my_model import GPT` beside the task file must work wherever pilot-tui was started.
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    module_name = f"pilot_user_task_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise TaskError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # user code: any failure is a bad input, never a crash
        raise TaskError(f"{file}: import failed{_user_frame(exc, file)}: {exception_line(exc)}") from None
    fn = getattr(module, t.function, None)
    if not callable(fn):
        raise TaskError(f"{file}: no function {t.function!r} (task.function in {loaded.path.name})")
    return fn, str(file)


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _check_builtin_options(loaded: LoadedSpec, fn: Callable[..., Any]) -> None:
    """A built-in's options against its own signature and bounds, before anything is built: a
    float where an integer is wanted, or a count no machine holds (the demo asked for 10⁹
    conversations), is one line naming the campaign file, the line and the key — never a
    TypeError from deep inside, or minutes of silence."""
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    bounds: dict[str, tuple[float, float]] = getattr(module, "OPTION_BOUNDS", {})
    params = inspect.signature(fn).parameters
    for key, value in loaded.spec.task.options.items():
        if key not in params:
            continue  # the call names it (an unexpected keyword argument)
        default = params[key].default
        kind = type(default) if default is not inspect.Parameter.empty and default is not None else None
        ok = (
            kind is None
            or (kind is bool and isinstance(value, bool))
            or (kind is int and isinstance(value, int) and not isinstance(value, bool))
            or (kind is float and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (kind not in (bool, int, float) and isinstance(value, kind))
        )
        if not ok:
            want = _KINDS.get(kind, kind.__name__ if kind else "?")
            raise TaskError(f"{loaded.where(f'task.options.{key}')}: expected {want}, got {value!r}")
        if key in bounds:
            low, high = bounds[key]
            if not low <= value <= high:
                raise TaskError(
                    f"{loaded.where(f'task.options.{key}')}: {value!r} is outside [{low:g}, {high:g}] "
                    f"(the bounds of the built-in {loaded.spec.task.builtin})"
                )


def _options(loaded: LoadedSpec, fn: Callable[..., Any]) -> dict[str, Any]:
    """`task.options`, with the paths a built-in declares (`PATH_OPTIONS`) made relative to the
    campaign file, as every path of a campaign is."""
    options = dict(loaded.spec.task.options)
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    for key in getattr(module, "PATH_OPTIONS", ()) if loaded.spec.task.builtin else ():
        if isinstance(options.get(key), str):
            options[key] = str(loaded.resolve(options[key]))
    return options


def load_task(loaded: LoadedSpec) -> Task:
    """Call the factory with `task.options` and check what it returned."""
    fn, origin = _factory(loaded)
    if loaded.spec.task.builtin:
        _check_builtin_options(loaded, fn)
    where = Path(origin) if Path(origin).is_file() else None
    try:
        task = fn(**_options(loaded, fn))
    except DataError as exc:
        # A data file or model directory the user must fix: its message already names the file.
        raise TaskError(str(exc)) from None
    except BaseException as exc:
        if isinstance(exc, TypeError) and loaded.spec.task.builtin and "argument" in str(exc):
            raise TaskError(f"{loaded.path}: task.options: {first_line(str(exc))}") from None
        line = _user_frame(exc, where) if where else ""
        # The options come from the campaign: name it and the key, not only the factory.
        raise TaskError(
            f"{origin}: {loaded.spec.task.function}() raised{line}: {exception_line(exc)} "
            f"(task.options in {loaded.path})"
        ) from None
    if not isinstance(task, Task):
        raise TaskError(f"{origin}: {loaded.spec.task.function}() returned {type(task).__name__}, not a Task")
    if task.kind not in KINDS:
        raise TaskError(f"{origin}: task kind {task.kind!r} is not one of {', '.join(KINDS)}")
    if len(task.examples) == 0:
        raise TaskError(f"{origin}: the task has no examples (empty dataset)")
    key = loaded.spec.task.group_key or task.group_key
    missing = next((i for i, ex in enumerate(task.examples) if key not in ex), None)
    if missing is not None:
        raise TaskError(
            f"{origin}: example {missing} has no group key field {key!r} (task.group_key in {loaded.path.name})"
        )
    return task
