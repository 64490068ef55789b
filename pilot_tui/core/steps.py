"""The ordered steps of a campaign, derived from its spec and the phase table (pure, no torch).

A step is one phase run for one variant (or one LR run). The TUI draws the steps as waiting rows
before anything runs; the runner executes them by key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import phase_table
from .phase_table import lr_run_name
from .rows import CONTROL, StepKey

if TYPE_CHECKING:
    from .spec import CampaignSpec


@dataclass(frozen=True)
class Step:
    """One phase for one variant; `key` is unique in the campaign."""

    key: str
    phase: str
    variant: str = CONTROL

    @classmethod
    def of(cls, phase: str, variant: str = CONTROL) -> Step:
        return cls(StepKey(phase, variant).key, phase, variant)

    @classmethod
    def parse(cls, key: str) -> Step:
        """A step from its key alone (a variant made on the fly in the TUI: `phase@variant`)."""
        parsed = StepKey.parse(key)
        return cls(key, parsed.phase, parsed.variant)

    @property
    def label(self) -> str:
        return StepKey(self.phase, self.variant).label


def _group_steps(spec: CampaignSpec, group: str) -> list[Step]:
    if group == "variants":
        # Each memory variant in the same loop, right after the control's engine phases (R11).
        return [Step.of(p, v.id) for v in spec.variants for p in phase_table.per_variant()]
    names = phase_table.in_group(group)
    if group == "search":
        # Largest microbatch (and max length) that fits, after the declared variants (R11).
        return [Step.of(p) for p in names] if spec.fit_search is not None else []
    if group == "board":
        if spec.lr_board is None:
            return []
        board = spec.lr_board
        runs = [lr_run_name(lr, seed) for lr in (board.control, *board.variants) for seed in board.seeds]
        return [Step.of(p, run) for p in names for run in runs]
    return [Step.of(p) for p in names]


def campaign_steps(spec: CampaignSpec) -> list[Step]:
    """Every step of the campaign in order, minus the phases the spec skips."""
    steps = [s for group in phase_table.GROUPS for s in _group_steps(spec, group)]
    skip = set(spec.phases.skip)
    return [s for s in steps if s.phase not in skip]


def find_step(steps: list[Step], key: str) -> Step:
    """The campaign's step with this key, or one parsed from the key (an ad-hoc variant)."""
    return next((s for s in steps if s.key == key), None) or Step.parse(key)
