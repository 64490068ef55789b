"""What the plan reads from a record, read once into typed facts (the record's edge, inbound).

A saved record can be re-planned at any time, so everything the plan needs comes from the
record's data: its spec (its own copy of the file), its rows, the stack check, the environment,
the split sizes and the `[fit]` search. Fields are read tolerantly, as `core.rows` reads a row: a
missing or mistyped field reads as absent, never as a made-up figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomli_w

from ...core import phase_table
from ...core.rows import (
    BASIS_CPU,
    BASIS_CUDA,
    CONTROL,
    PhaseRow,
    StepKey,
    newest_by_key,
    num,
    number,
    read_rows,
)
from ...core.spec import CampaignSpec, SpecError, parse_spec

Rows = Mapping[str, PhaseRow]


def table(data: Any, key: str) -> Mapping[str, Any]:
    """`data[key]` when it is a table, else an empty one."""
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def tables(data: Any, key: str) -> list[Mapping[str, Any]]:
    """The tables of the array `data[key]` (anything else in it is skipped)."""
    value = data.get(key) if isinstance(data, Mapping) else None
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def text(data: Mapping[str, Any], key: str, default: str = "") -> str:
    """`data[key]` as text, `default` when absent."""
    value = data.get(key, default)
    return default if value is None else str(value)


def number_at(data: Mapping[str, Any], key: str) -> float | None:
    """`data[key]` when it is a finite number, else None."""
    return number(data.get(key))


def spec_of(data: Mapping[str, Any]) -> CampaignSpec:
    """The campaign spec the record ran under (its own copy of the file, validated again)."""
    campaign = table(data, "campaign")
    spec_text = campaign.get("spec_text")
    if not isinstance(spec_text, str) or not spec_text.strip():
        raw = campaign.get("spec")
        if not isinstance(raw, dict):
            raise SpecError("the record holds no campaign spec (campaign.spec_text)")
        spec_text = tomli_w.dumps(raw)
    path = Path(text(campaign, "spec_path") or "campaign.toml")
    return trainer_batch_of(parse_spec(spec_text, path).spec, data.get("accounting"))


def trainer_batch_of(spec: CampaignSpec, accounting: Any) -> CampaignSpec:
    """A trainer campaign's file declares no batch: the trainer's own (its per-device batch,
    accumulation, run length), which the runner read from its args, is the record's
    `accounting`. The plan must count the script's run, not the file's placeholders."""
    if not spec.task.captures_trainer or not isinstance(accounting, Mapping):
        return spec
    found: dict[str, Any] = {}
    for key in ("microbatch", "accumulation", "updates", "epochs"):
        value = accounting.get(key)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and value >= 1
            and value == int(value)
        ):
            found[key] = int(value)
    if accounting.get("hold") in ("updates", "epochs"):
        found["hold"] = accounting["hold"]
    if isinstance(accounting.get("drop_last"), bool):
        found["drop_last"] = accounting["drop_last"]
    return replace(spec, batch=replace(spec.batch, **found))


def all_rows(data: Mapping[str, Any]) -> list[PhaseRow]:
    """Every readable `[[phases]]` row, in order."""
    return read_rows(data.get("phases"))


def newest_rows(data: Mapping[str, Any]) -> dict[str, PhaseRow]:
    """By step key, the newest row of each step: a retry is a new row, the newest is the measurement."""
    return newest_by_key(all_rows(data))


def step_key(phase: str, config: str) -> str:
    return StepKey(phase, config).key


def configurations(rows: list[PhaseRow], spec: CampaignSpec) -> list[str]:
    """control, the declared variants, then any variant made on the fly that has rows."""
    ids = ["control", *(v.id for v in spec.variants)]
    for row in rows:
        if row.name in phase_table.per_variant() and row.variant not in ids:
            ids.append(row.variant)
    return ids


def memory_basis(rows: Rows) -> str:
    """Which counter the memory figures are: CUDA peak reserved, or the CPU process's peak RSS."""
    return BASIS_CUDA if any(row.memory.on_cuda for row in rows.values()) else BASIS_CPU


def own_rows(config: str, rows: Rows) -> list[PhaseRow]:
    """The rows measured with this configuration's own inputs: its memory gates, and for the
    control the engine phases that checkpoint and export its state. Not the fit search (its own
    microbatches), the LR runs, resume or final: they measure other configurations."""
    phases = phase_table.in_group("engine") if config == "control" else phase_table.per_variant()
    return [row for p in phases if (row := rows.get(step_key(p, config))) is not None]


@dataclass(frozen=True)
class Gpu:
    """One GPU as the stack phase or the environment saw it."""

    name: str
    memory_mb: float


@dataclass(frozen=True)
class Stack:
    """The stack check: its verdict (`missing` when it did not run) and what it found."""

    status: str
    reason: str
    device: str = ""
    torch: str = ""
    cuda: str = ""
    # (precision, supported, why not) for each precision it tried.
    precisions: tuple[tuple[str, bool, str], ...] = ()
    bf16: bool | None = None
    gpus: tuple[Gpu, ...] = ()

    def precision_ok(self, precision: str) -> tuple[bool, str]:
        for name, ok, error in self.precisions:
            if name == precision:
                return ok, error
        if precision == "bf16" and self.bf16 is not None:
            return (True, "") if self.bf16 else (False, "bf16 is not supported on this device")
        if precision == "fp32" or not self.precisions:
            return True, ""
        # e.g. a variant made in the TUI after the stack phase ran: nothing is kept unchecked (R18).
        return False, "the stack phase did not check it"


def _gpus(items: list[Mapping[str, Any]]) -> tuple[Gpu, ...]:
    return tuple(Gpu(text(g, "name"), num(number_at(g, "memory_mb"))) for g in items)


def read_stack(row: PhaseRow | None) -> Stack:
    if row is None:
        return Stack("missing", "the stack phase did not run: nothing can be kept unchecked")
    d = row.details
    precisions = tuple(
        (text(p, "precision"), bool(p.get("ok")), text(p, "error")) for p in tables(d, "precisions")
    )
    bf16 = d.get("bf16")
    return Stack(
        status=row.verdict,
        reason=row.reason,
        device=text(d, "device"),
        torch=text(d, "torch"),
        cuda=text(d, "cuda"),
        precisions=precisions,
        bf16=bool(bf16) if "bf16" in d else None,
        gpus=_gpus(tables(d, "gpus")),
    )


@dataclass(frozen=True)
class Environment:
    """The `[environment]` the pilot ran in."""

    device: str = ""
    torch: str = ""
    cuda: str = ""
    # False only when the record says matmuls ran with TF32 off on a GPU.
    tf32_matmul: bool = True
    gpus: tuple[Gpu, ...] = ()
    present: frozenset[str] = field(default_factory=frozenset)


def read_environment(data: Mapping[str, Any]) -> Environment:
    env = table(data, "environment")
    return Environment(
        device=text(env, "device"),
        torch=text(env, "torch"),
        cuda=text(env, "cuda"),
        tf32_matmul=bool(env.get("tf32_matmul", True)),
        gpus=_gpus(tables(env, "devices")),
        present=frozenset(k for k in ("device", "torch", "cuda") if k in env),
    )


@dataclass(frozen=True)
class Fit:
    """The `[fit]` search's result, when it found a largest microbatch."""

    found: bool = False
    largest_microbatch: int | None = None
    max_length: int | None = None


def read_fit(data: Mapping[str, Any]) -> Fit:
    fit = table(data, "fit")
    mb, length = number_at(fit, "largest_microbatch"), number_at(fit, "max_length")
    return Fit(
        found=bool(fit.get("found")),
        largest_microbatch=None if mb is None else int(mb),
        max_length=None if length is None else int(length),
    )


@dataclass(frozen=True)
class Question:
    """Whether a variant changes the experimental question (R12), as `[[variants]]` holds it."""

    changes_question: bool
    note: str


def read_questions(data: Mapping[str, Any]) -> dict[str, Question]:
    return {
        text(v, "id"): Question(bool(v["changes_question"]), text(v, "question_note"))
        for v in tables(data, "variants")
        if "changes_question" in v
    }


def split_sizes(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`[dataset] splits`: examples per split of the pilot's data."""
    return table(table(data, "dataset"), "splits")


@dataclass(frozen=True)
class Facts:
    """Everything the plan computes from, read from one record."""

    spec: CampaignSpec
    rows: Rows
    stack: Stack
    environment: Environment
    fit: Fit
    questions: Mapping[str, Question]
    # Examples per split of the pilot's data ([dataset] splits).
    train_examples: int
    validation_examples: int
    configurations: tuple[str, ...]
    # The campaign file the record ran (`[campaign] spec_path`): paths in the spec are relative to it.
    spec_path: str = ""

    def row(self, phase: str, config: str = CONTROL) -> PhaseRow | None:
        """The newest row of `phase` for `config`, if it ran."""
        return self.rows.get(step_key(phase, config))


def read_facts(data: Mapping[str, Any], spec: CampaignSpec | None = None) -> Facts:
    spec = spec or spec_of(data)
    every = all_rows(data)
    rows = newest_by_key(every)
    splits = split_sizes(data)
    return Facts(
        spec=spec,
        rows=rows,
        stack=read_stack(rows.get(step_key("stack", CONTROL))),
        environment=read_environment(data),
        fit=read_fit(data),
        questions=read_questions(data),
        train_examples=int(num(number_at(splits, "train"))),
        validation_examples=int(num(number_at(splits, "validation"))),
        configurations=tuple(configurations(every, spec)),
        spec_path=text(table(data, "campaign"), "spec_path"),
    )
