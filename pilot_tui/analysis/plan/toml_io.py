"""The plan's results to and from the record's `[plan]` TOML: the only place they are dicts.

Every result is a frozen dataclass; `as_toml` writes its fields (nested results as tables, a
field left `None` as absent: TOML has no null), and `from_toml` reads them back strictly — a
missing required key or a mistyped value raises, so a `[plan]` written by an older version is
told apart (the Plan pane then shows it as it is) rather than read into made-up figures.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class PlanFormatError(ValueError):
    """A `[plan]` table that does not hold what this version writes."""


def as_toml(value: Any) -> Any:
    """A result as TOML-ready data: dataclasses as tables, `None` fields left out, tuples as arrays."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is not None:
                out[f.name] = as_toml(item)
        return out
    if isinstance(value, list | tuple):
        return [as_toml(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): as_toml(v) for k, v in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_toml(cls: type[T], data: Any, where: str = "plan") -> T:
    """A result of type `cls` from the table `as_toml` wrote; PlanFormatError names what is wrong."""
    if not isinstance(data, Mapping):
        raise PlanFormatError(f"{where}: expected a table, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif _optional(hints[f.name]):
            kwargs[f.name] = None  # `as_toml` leaves a None out: TOML has no null
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise PlanFormatError(f"{where}.{f.name}: missing")
    return cls(**kwargs)


def _optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _value(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _value(args[0], value, where)
    if dataclasses.is_dataclass(tp):
        return from_toml(tp, value, where)  # type: ignore[arg-type]
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise PlanFormatError(f"{where}: expected an array")
        item = typing.get_args(tp)[0]
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is Mapping or tp is Mapping:
        if not isinstance(value, Mapping):
            raise PlanFormatError(f"{where}: expected a table")
        return dict(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) != (tp is bool) or not isinstance(value, tp):
        raise PlanFormatError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    return value
