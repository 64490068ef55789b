"""The configuration dimensions: every knob of a training configuration a variant may change.

One entry per dimension, and every consumer reads this table: spec validation (`[[variants]]`
keys, their types and allowed values, "changes nothing"), the runner's configuration
(`RunContext.config` -> `TrainConfig` -> the row's `params`), the LR run's allowed overrides,
the fake-tensor estimate's configuration, the variant comparison (`[[variants]]` entries, the
same-question check), the Board's columns and the variant form (`v`). A new dimension is its
entry here, the spec field that holds the control's value, and the code where it takes effect.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("none", "ddp", "fsdp")
# The runner's builders (runner/loop/optimizers.py) are checked against these names when it starts.
OPTIMIZERS = ("adamw", "adamw_fused", "sgd", "adafactor")

# Does a change of this dimension change the experimental question (R12)?
#   same: never (memory mechanics: the same updates, computed another way)
#   changed: always (other updates: the results are not the control's)
#   measured: it depends, and the comparison measures it (targets cut, effective batch moved)
Question = Literal["same", "changed", "measured"]
# The variant form's widget; "" keeps the dimension out of the form.
Form = Literal["", "integer", "select", "checkbox"]


@dataclass(frozen=True)
class Dimension:
    """One configuration dimension.

    `name` is at once the row-params key, the `[[variants]]` key, the override key and the
    `[[variants]]` comparison key; `spec_field` is the dotted spec key of the control's value
    (a variant may spell the dimension that way too).
    """

    name: str
    spec_field: str
    type: type
    # Allowed values (empty: any value of the type); `minimum` bounds a number a variant sets.
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    # The Board's column header ("" = no column of its own) and the variant form's widget.
    column: str = ""
    form: Form = ""
    label: str = ""
    # The fake-tensor estimate takes the configuration's value (False: it does not depend on it,
    # or takes it from elsewhere, e.g. the strategy from `[estimate]`'s target machine).
    estimable: bool = True
    question: Question = "same"
    # With question "changed": groups of values that still ask the same question (one algorithm,
    # two kernels).
    alike: tuple[frozenset[Any], ...] = ()
    # A `[[variants]]` entry may set it (False: another part of the campaign varies it).
    variant: bool = True
    # An LR run may take it as an override (lr_run_row.plan_run checks the board stays comparable).
    lr_run: bool = False

    @property
    def params_key(self) -> str:
        return self.name

    def changes_question(self, control: Any, value: Any) -> bool:
        """Whether `value` instead of the control's asks another question by itself."""
        if self.question != "changed" or value == control:
            return False
        return not any(control in group and value in group for group in self.alike)

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "microbatch",
        "batch.microbatch",
        int,
        minimum=1,
        column="mb×acc",
        form="integer",
        question="measured",  # a smaller one raises the accumulation; a moved effective batch is flagged
        lr_run=True,
    ),
    Dimension("accumulation", "batch.accumulation", int, minimum=1, question="measured", lr_run=True),
    Dimension(
        "max_length",
        "batch.max_length",
        int,
        minimum=1,
        column="len",
        form="integer",
        question="measured",  # cut responses change the targets: compared over the whole train split
        lr_run=True,
    ),
    Dimension("precision", "batch.precision", str, PRECISIONS, column="prec", form="select", lr_run=True),
    Dimension(
        "activation_checkpointing",
        "batch.activation_checkpointing",
        bool,
        column="ckpt",
        form="checkbox",
        lr_run=True,
    ),
    # ddp -> fsdp is the per-GPU memory question people pilot; the estimate's strategy is its
    # target machine's (`[estimate] strategy`), so the variant's is not what it estimates.
    Dimension("strategy", "distributed.strategy", str, STRATEGIES, estimable=False),
    # The LR board varies the LR (R13); a memory variant keeps the control's.
    Dimension("lr", "optim.lr", float, estimable=False, question="changed", variant=False, lr_run=True),
    # Another optimizer keeps other state (AdamW 2 moments, Adafactor factored ones, SGD one
    # momentum) and makes other updates: a memory variant that changes the question.
    Dimension(
        "optimizer",
        "optim.name",
        str,
        OPTIMIZERS,
        column="optim",
        form="select",
        question="changed",
        alike=(frozenset({"adamw", "adamw_fused"}),),
    ),
)


def by_name(name: str) -> Dimension:
    for d in DIMENSIONS:
        if d.name == name:
            return d
    raise KeyError(name)


def variant_dimensions() -> list[Dimension]:
    return [d for d in DIMENSIONS if d.variant]


def estimable() -> list[Dimension]:
    return [d for d in DIMENSIONS if d.estimable]


def lr_run_overrides() -> frozenset[str]:
    return frozenset(d.name for d in DIMENSIONS if d.lr_run)


def with_column() -> list[Dimension]:
    return [d for d in DIMENSIONS if d.column]


def in_form() -> list[Dimension]:
    return [d for d in DIMENSIONS if d.form]


def for_variant_key(key: str) -> Dimension | None:
    """The dimension a `[[variants]]` key names: its name, or its spec field (`optim.name`)."""
    for d in variant_dimensions():
        if key in (d.name, d.spec_field):
            return d
    return None


def unknown_variant_key(key: str) -> str:
    """The message for a `[[variants]]` key no dimension has, with the nearest one."""
    for d in DIMENSIONS:
        if key in (d.name, d.spec_field) and not d.variant:
            return f"a memory variant keeps the control's {d.name} ({d.spec_field}); another part of the campaign varies it"
    known = ["id", *(d.name for d in variant_dimensions())]
    close = difflib.get_close_matches(key, known + [d.spec_field for d in variant_dimensions()], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key ({hint}known here: {', '.join(sorted(known))})"


def flat_keys(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of a table: `optim.name = "sgd"` in TOML is `{"optim": {"name": "sgd"}}`."""
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            yield from flat_keys(value, path)
        else:
            yield path, value


def control_value(spec: Any, d: Dimension) -> Any:
    """The control's value of a dimension: its spec field, read from the campaign spec."""
    value = spec
    for part in d.spec_field.split("."):
        value = getattr(value, part)
    return value


def is_set(d: Dimension, value: Any) -> bool:
    """An override or a variant value that says something (None, "" and a 0 count say nothing)."""
    if value is None or value == "":
        return False
    return not (d.type in (int, float) and not isinstance(value, bool) and value == 0)


def problem(d: Dimension, value: Any) -> str | None:
    """Why a value a variant (or an override) gives this dimension is not allowed, or None."""
    if d.choices and value not in d.choices:
        return f"must be one of {', '.join(map(str, d.choices))}, got {value!r}"
    if d.minimum is not None and isinstance(value, int | float) and value < d.minimum:
        return f"must be ≥ {d.minimum:g} (or left out), got {value}"
    return None
