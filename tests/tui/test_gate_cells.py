"""A Gates row's cells: the note mark and a long label share the step column."""

from __future__ import annotations

import pytest

from pilot_tui.tui.panes.gates import LABEL_WIDTH, row_cells
from pilot_tui.tui.state import GateState


@pytest.mark.parametrize("label", ["inspect", "serving_check [control]", "lr_run [lr1e-4-s0] on 8 ranks"])
def test_a_noted_step_shows_its_mark_whatever_its_label_length(label: str) -> None:
    gate = GateState(key="k", label=label, phase="p")
    noted = row_cells(gate, None, 0.0, noted=True)[1].plain
    plain = row_cells(gate, None, 0.0)[1].plain
    assert noted.endswith(" ✎") and len(noted) <= LABEL_WIDTH
    assert "✎" not in plain and len(plain) <= LABEL_WIDTH
    # A cut label still ends in "…", so a shortened name never reads as whole.
    assert (len(label) > LABEL_WIDTH - 2) == ("…" in noted)
