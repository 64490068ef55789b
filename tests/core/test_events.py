"""The wire format: what a message encodes to is what the other side decodes, NaN included."""

from __future__ import annotations

import json
import math
from dataclasses import make_dataclass

import pytest

from pilot_tui.core.events import Counters, PhaseFinished, PhaseStarted, RecordUpdate, decode


def test_a_row_with_non_finite_values_round_trips() -> None:
    row = {"verdict": "fail", "details": {"losses": [2.5, math.nan, -math.inf], "loss": math.inf}}
    line = PhaseFinished(step="steady", row=row).to_json()
    json.loads(line)  # strict JSON: no bare NaN on the wire
    assert "NaN" not in line and "Infinity" not in line
    back = decode(line)
    assert isinstance(back, PhaseFinished)
    losses = back.row["details"]["losses"]
    assert losses[0] == 2.5 and math.isnan(losses[1]) and losses[2] == -math.inf
    assert back.row["details"]["loss"] == math.inf


def test_plain_messages_round_trip_unchanged() -> None:
    for message in (
        PhaseStarted(step="s", phase="steady", variant="control", params={"microbatch": 4, "shape": (4, 28)}),
        Counters(time=1.5, device="cpu", values={"rss_mb": 225.6}),
    ):
        back = decode(message.to_json())
        assert type(back) is type(message)
        assert json.loads(back.to_json()) == json.loads(message.to_json())
    assert decode(PhaseStarted(step="s", phase="p", variant="v", params={"t": (1, 2)}).to_json()).params == {
        "t": [1, 2]
    }


def test_a_nested_dataclass_goes_out_as_its_fields() -> None:
    # Made with real types, not a decorated class: tests/test_layers.py imports this module
    # outside sys.modules, where a dataclass with string annotations cannot be built.
    part = make_dataclass("Part", [("name", str), ("value", float)])
    for value in (part("a", 1.0), part("b", math.nan)):
        back = decode(RecordUpdate(section="plan", value={"part": value}).to_json())
        got = back.value["part"]
        assert got["name"] == value.name
        assert got["value"] == value.value or (math.isnan(got["value"]) and math.isnan(value.value))


def test_what_json_cannot_encode_is_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        RecordUpdate(section="plan", value={"x": object()}).to_json()
