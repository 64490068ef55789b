"""The ordered steps of a campaign, derived from its spec alone (pure, no torch).

A step is one phase run for one variant (or one LR run). The TUI draws the steps as waiting rows
before anything runs; the runner executes them by key.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import CampaignSpec

# Software stack first, so a campaign fails fast (R18).
STACK_PHASES = ("stack",)
# Data and objective checks run before any weights are loaded (R1-R4).
DATA_PHASES = ("inspect", "split", "overfit")
# The engine's phases, in the order a campaign meets them (R5).
ENGINE_PHASES = ("load", "first_step", "steady", "eval_longest", "save", "export")
# What a memory variant re-measures (R11).
VARIANT_PHASES = ("first_step", "steady", "eval_longest")
# Resume in a new process, then the final reload of the exported artifact (R15, R16).
CLOSING_PHASES = ("resume", "final")
# Every phase a campaign can name (in `phases.skip`), in campaign order.
PHASE_NAMES = (*STACK_PHASES, *DATA_PHASES, *ENGINE_PHASES, "fit_search", "lr_run", *CLOSING_PHASES)


@dataclass(frozen=True)
class Step:
    """One phase for one variant; `key` is unique in the campaign."""

    key: str
    phase: str
    variant: str = "control"

    @property
    def label(self) -> str:
        return self.phase if self.variant == "control" else f"{self.phase} [{self.variant}]"


def step_key(phase: str, variant: str = "control") -> str:
    return phase if variant == "control" else f"{phase}@{variant}"


def lr_run_name(lr: float, seed: int) -> str:
    """The base name of an LR run; the record adds an attempt number that is never reused."""
    mantissa, exponent = f"{lr:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"lr{mantissa}e{int(exponent)}-s{seed}"


def campaign_steps(spec: CampaignSpec) -> list[Step]:
    """Every step of the campaign in order, minus the phases the spec skips."""
    steps = [Step(step_key(p), p) for p in (*STACK_PHASES, *DATA_PHASES, *ENGINE_PHASES)]
    for variant in spec.variants:
        steps += [Step(step_key(p, variant.id), p, variant.id) for p in VARIANT_PHASES]
    if spec.fit_search is not None:
        # Largest microbatch (and max length) that fits, after the declared variants (R11).
        steps.append(Step(step_key("fit_search"), "fit_search"))
    if spec.lr_board is not None:
        board = spec.lr_board
        for lr in (board.control, *board.variants):
            for seed in board.seeds:
                name = lr_run_name(lr, seed)
                steps.append(Step(step_key("lr_run", name), "lr_run", name))
    steps += [Step(step_key(p), p) for p in CLOSING_PHASES]
    skip = set(spec.phases.skip)
    return [s for s in steps if s.phase not in skip]
