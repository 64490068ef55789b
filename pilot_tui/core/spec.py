"""Campaign spec: what the user declares *before* anything runs.

Read with tomllib into frozen dataclasses and validated once. Every error names the file, the
key and, when it can be found, the line; the caller turns it into exit code 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import os
import re
import stat
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dimensions, phase_table

# The allowed values of the configuration dimensions, re-exported for the views' checks.
from .dimensions import OPTIMIZERS as OPTIMIZERS
from .dimensions import PRECISIONS as PRECISIONS
from .dimensions import STRATEGIES as STRATEGIES
from .launch import find_command, runs_python
from .phase_table import lr_run_name

HOLDS = ("updates", "epochs")
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
DEVICES = ("auto", "cpu", "cuda")
SCHEDULES = ("constant", "linear", "cosine")
GROUP_KINDS = ("id", "time")
BACKENDS = ("", "nccl", "gloo")
# A record is named `<name>-<id>.toml`; file systems stop at 255 bytes.
MAX_NAME = 100


class SpecError(Exception):
    """A campaign file that cannot be used; the message is one line, ready to print."""


@dataclass(frozen=True)
class CampaignSection:
    """Who this campaign is."""

    name: str
    description: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """Which task to pilot: a built-in demo or a user file with a factory function."""

    builtin: str = ""
    file: str = ""
    function: str = "make_task"
    # Keyword arguments handed to the task factory.
    options: dict[str, Any] = field(default_factory=dict)
    # The example field that is the unit of leakage (conversation, patient, document, period).
    group_key: str = ""
    group_kind: str = "id"
    # What the campaign wants: are prompt tokens supervised? (R2)
    supervise_prompt: bool = False
    # Declared class id -> name mapping, checked against the data (R2).
    class_names: list[str] = field(default_factory=list)
    # Extension modules the task imports, checked by the stack phase (R18).
    requires: list[str] = field(default_factory=list)
    # A Hugging Face Trainer / TRL script piloted unchanged (docs/trainer.md): the script, what
    # would follow `python train.py` on the command line, and environment variables it reads.
    # The program as the user launches it: a `.py` script, a console command (its path, or its
    # name alone), or a module (`python -m trainer_module`).
    trainer_script: str = ""
    trainer_module: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # The arguments as the user typed them to `init`, where the piloted `args` differ (an added
    # `--do_train`, a path rewritten relative to the campaign): the load row says how.
    given_args: list[str] = field(default_factory=list)

    @property
    def captures_trainer(self) -> bool:
        """A campaign that pilots the user's own training program (docs/trainer.md)."""
        return bool(self.trainer_script or self.trainer_module)

    @property
    def program(self) -> str:
        """The program in the user's words: `train.py`, `llamafactory-cli`, `-m trl.scripts.sft`."""
        return f"-m {self.trainer_module}" if self.trainer_module else self.trainer_script


@dataclass(frozen=True)
class SplitSpec:
    """How train / validation / test are made: ratios + seed, or a field holding ready splits."""

    train: float = 0.8
    validation: float = 0.1
    test: float = 0.1
    seed: int = 0
    field: str = ""


@dataclass(frozen=True)
class BatchSpec:
    """Examples per forward/backward, per update, and what the campaign holds fixed (R8, R9)."""

    microbatch: int
    accumulation: int = 1
    replicas: int = 1
    max_length: int = 0
    precision: str = "fp32"
    drop_last: bool = True
    hold: str = "updates"
    updates: int = 0
    epochs: int = 0
    device: str = "auto"
    activation_checkpointing: bool = False
    # The steady phase feeds its batches through a torch DataLoader with these.
    num_workers: int = 0
    pin_memory: bool = False


@dataclass(frozen=True)
class OptimSpec:
    """Optimizer and schedule of the control configuration."""

    # adamw | adamw_fused | sgd | adafactor (runner/loop/optimizers.py builds each).
    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_updates: int = 0
    schedule: str = "constant"
    grad_clip: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class PhasesSpec:
    """Sizes of the engine phases."""

    # The fewest timed steady updates; steady then times more until the 95 % interval of the mean
    # step time is within ±steady_precision of it (0: exactly steady_updates), or until
    # steady_budget_s of timing has passed (never more than half the phase's time_s ceiling).
    # It reaches the precision no sooner than steady_min_s of timing (or the budget, if less):
    # a second of a steady loop can sit inside one stretch of a VM whose speed moves.
    steady_updates: int = 10
    steady_precision: float = 0.03
    steady_budget_s: float = 6.0
    steady_min_s: float = 1.5
    eval_microbatch: int = 0
    skip: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LimitSpec:
    """A gate's ceilings for one phase; 0 means no ceiling."""

    memory_mb: float = 0.0
    time_s: float = 0.0


@dataclass(frozen=True)
class InspectSpec:
    """Batch inspection (R1, R2): how many examples to show token by token."""

    examples: int = 4


@dataclass(frozen=True)
class OverfitSpec:
    """Tiny-subset mechanics check (R3)."""

    examples: int = 16
    max_steps: int = 100
    loss_below: float = 0.1
    recover: float = 1.0
    lr: float = 3e-3


# The `[[variants]]` keys of a fresh capture of a trainer script (VariantSpec.args / .env).
FRESH_CAPTURE_KEYS = ("args", "env")


@dataclass(frozen=True)
class VariantSpec:
    """A memory variant (R11): the configuration dimensions it sets (core/dimensions.py); an
    unset one keeps the control's value."""

    id: str
    values: dict[str, Any] = field(default_factory=dict)
    # A captured trainer's variant built by a fresh capture (what its constructor fixes: precision,
    # max length, FSDP): arguments appended to `task.args`, variables merged over `task.env`.
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The value this variant sets for a dimension, None when it keeps the control's."""
        return self.values.get(name)

    @property
    def fresh_capture(self) -> bool:
        """Whether the variant's script runs again with other arguments or environment."""
        return bool(self.args or self.env)


@dataclass(frozen=True)
class FitSearchSpec:
    """Largest configuration that fits (R11, R18): microbatches (and max lengths) to try, ascending.

    A point fits when its first optimizer step and its eval on the longest sequences pass the
    memory limit: `memory_mb` if set, else the `first_step` / `eval_longest` ceilings, and no
    out-of-memory. The accumulation reported keeps the declared effective batch.
    """

    microbatches: list[int]
    max_lengths: list[int] = field(default_factory=list)
    memory_mb: float = 0.0
    # Once a microbatch fails at a max length, larger ones are not tried there (memory grows with it).
    stop_at_first_failure: bool = True


@dataclass(frozen=True)
class StopSpec:
    """Stop causes declared before the LR runs (R13)."""

    non_finite: bool = True
    explosion_factor: float = 4.0
    plateau_validations: int = 0


@dataclass(frozen=True)
class LRBoardSpec:
    """The LR comparison: identical budget, data and effective batch for every run (R13)."""

    control: float
    variants: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])
    updates: int = 200
    validate_every: int = 20
    stop: StopSpec = field(default_factory=StopSpec)


@dataclass(frozen=True)
class ResumeSpec:
    """Resume test (R15): train k, save, resume in a new process for n more."""

    k: int = 6
    n: int = 6
    tolerance: float = 0.0


@dataclass(frozen=True)
class ReplaySpec:
    """`[replay] inputs`: replayed through the model before the save and after the reload (R16)."""

    inputs: list[str] = field(default_factory=list)


# `[replay]` was called `[control]` (which also names the campaign's own configuration); campaigns
# and records written with the old name still read.
OLD_REPLAY_SECTION = "control"


@dataclass(frozen=True)
class PlanSpec:
    """What the rental plan is computed for (R18, R19)."""

    dataset_size: int = 0
    epochs: int = 1
    headroom: float = 0.15
    safety_margin: float = 0.2
    priority: list[str] = field(default_factory=list)
    expected_result: str = ""
    distribution: str = "single-gpu"
    gpus: int = 1
    # Reserve for the full run: evaluations over the full validation set and checkpoint saves;
    # 0 means one per epoch. validation_size 0 means dataset_size × split.validation / split.train.
    evaluations: int = 0
    checkpoints: int = 0
    validation_size: int = 0
    # The whole rental (R27), as the real run will spend it. save_every / eval_every: updates
    # between saves / evaluations (0: `checkpoints` / `evaluations` above); keep: checkpoints kept
    # on disk (0: every one); eval_examples: examples per evaluation (0: `validation_size`);
    # restarts: how many times the run is allowed to restart from its last checkpoint;
    # checkpoint_dir: where checkpoints go, relative to the campaign file ("": the records' folder).
    save_every: int = 0
    keep: int = 0
    eval_every: int = 0
    eval_examples: int = 0
    restarts: int = 1
    checkpoint_dir: str = ""
    # The provider's limits: jobs end after this many hours (0: never; Modal: 24) and may be
    # preempted. The plan cuts the run into jobs and derives the save interval (analysis/plan/jobs.py).
    max_job_hours: float = 0.0
    preemptible: bool = False


@dataclass(frozen=True)
class EstimateSpec:
    """The machine the per-GPU memory estimate is for (R23); unset values take the defaults."""

    # none | ddp | fsdp; default: none on one GPU, ddp on several.
    strategy: str = ""
    # GPUs (ranks) per configuration; 0 = plan.gpus.
    gpus: int = 0
    # The GPU memory to check against, in GB; 0 = report the smallest common size that holds it.
    gpu_memory_gb: float = 0.0


@dataclass(frozen=True)
class DistributedSpec:
    """How the engine phases run on several processes under torchrun (R22)."""

    strategy: str = "none"
    # 0: batch.replicas when declared, else every visible GPU on cuda (resolved by the runner), 1 on cpu.
    nproc_per_node: int = 0
    # "": nccl on GPUs, gloo on CPU.
    backend: str = ""
    # Collective timeout; a rank with no progress for this long fails its phase.
    timeout_s: float = 300.0
    # Size of the stack phase's all-reduce; 0: 64 MiB on GPUs, 8 MiB on CPU.
    allreduce_mb: float = 0.0
    # The steady row warns when waiting for data takes more than this share of an update.
    data_wait_warn: float = 0.10
    # "sharded" (torch.distributed.checkpoint, each rank its shards) | "full" (the gathered state
    # dict, one file by rank 0); "": sharded under fsdp, full otherwise (R28).
    checkpoint: str = ""
    # Several machines (R28): nnodes × nproc_per_node ranks through torchrun's c10d rendezvous at
    # rdzv_endpoint ("host:port": the dashboard's node as the other nodes reach it; it hosts the
    # rendezvous store there). The other nodes run `pilot-tui agent CAMPAIGN --rdzv host:port`.
    nnodes: int = 1
    rdzv_endpoint: str = ""
    # How long the other nodes get to join a group before the phase fails naming them.
    join_timeout_s: float = 300.0

    @property
    def world(self) -> int:
        """Every rank of every node (0 while nproc_per_node is left to the runner)."""
        return self.nproc_per_node * self.nnodes


@dataclass(frozen=True)
class CampaignSpec:
    """The whole campaign file."""

    campaign: CampaignSection
    task: TaskSpec
    batch: BatchSpec
    split: SplitSpec = field(default_factory=SplitSpec)
    optim: OptimSpec = field(default_factory=OptimSpec)
    phases: PhasesSpec = field(default_factory=PhasesSpec)
    limits: dict[str, LimitSpec] = field(default_factory=dict)
    inspect: InspectSpec = field(default_factory=InspectSpec)
    overfit: OverfitSpec = field(default_factory=OverfitSpec)
    variants: list[VariantSpec] = field(default_factory=list)
    lr_board: LRBoardSpec | None = None
    fit_search: FitSearchSpec | None = None
    resume: ResumeSpec = field(default_factory=ResumeSpec)
    replay: ReplaySpec = field(default_factory=ReplaySpec)
    plan: PlanSpec = field(default_factory=PlanSpec)
    estimate: EstimateSpec = field(default_factory=EstimateSpec)
    distributed: DistributedSpec = field(default_factory=DistributedSpec)

    def limit_for(self, phase: str) -> LimitSpec:
        """The phase's own ceilings, else the `[limits.default]` ones."""
        return self.limits.get(phase) or self.limits.get("default") or LimitSpec()


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from (the record copies all of it)."""

    spec: CampaignSpec
    path: Path
    text: str
    raw: dict[str, Any]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def resolve(self, relative: str) -> Path:
        """A path written in the spec is relative to the spec file."""
        return (self.path.parent / relative).resolve()

    def program_path(self) -> Path | None:
        """The file `task.trainer_script` names: relative to the spec file, or a console command's
        name alone found beside this Python or on PATH (links kept: the path as written)."""
        script = self.spec.task.trainer_script
        if not script:
            return None
        beside = self.path.parent / script
        if beside.is_file():
            return Path(os.path.abspath(beside))
        if "/" not in script and os.sep not in script:
            found = find_command(script)
            return Path(found) if found else None
        return None

    def where(self, key: str) -> str:
        """`FILE: line N: KEY` for a message about a dotted key (the line when it can be found)."""
        line = _line_of(self.text, key)
        return f"{self.path}: {f'line {line}: ' if line else ''}{key}"


# --------------------------------------------------------------------------------------------
# Typed building with key paths; every failure becomes one SpecError line.


class _KeyError(Exception):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


def _type_name(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is list:
        return "an array"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def _convert(tp: Any, value: Any, key: str) -> Any:
    if tp is VariantSpec:
        return _build_variant(value, key)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value, key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _KeyError(key, f"expected a table, got {type(value).__name__}")
        return _build(tp, value, key)
    if origin is list:
        if not isinstance(value, list):
            raise _KeyError(key, f"expected an array, got {_describe(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _KeyError(key, f"expected a table, got {_describe(value)}")
        _, item = typing.get_args(tp)
        if item is Any:
            return dict(value)
        return {k: _convert(item, v, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    # TOML spells inf and nan; no key of a campaign means anything by them (0 is "no ceiling").
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise _KeyError(key, f"expected a finite number, got {value}")
    # bool is an int subclass in Python; TOML keeps them apart, so do we.
    if isinstance(value, bool) != (tp is bool) or not isinstance(value, tp):
        raise _KeyError(key, f"expected {_type_name(tp)}, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, int | float):
        return f"number {value}"
    return type(value).__name__


def _build(cls: Any, table: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields:
            known = ", ".join(sorted(fields))
            what = "section" if isinstance(table[key], dict | list) and not prefix else "key"
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _KeyError(_join(prefix, key), f"unknown {what} ({hint}known here: {known})")
    kwargs = {}
    for name, f in fields.items():
        key = _join(prefix, name)
        if name in table:
            kwargs[name] = _convert(hints[name], table[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if dataclasses.is_dataclass(hints[name]):
                raise _KeyError(key, f"required section [{key}] is missing")
            raise _KeyError(key, "required key is missing")
    return cls(**kwargs)


def _build_variant(table: Any, key: str) -> VariantSpec:
    """A `[[variants]]` entry: its id and the dimensions it sets, each typed by the table."""
    if not isinstance(table, dict):
        raise _KeyError(key, f"expected a table, got {_describe(table)}")
    if "id" not in table:
        raise _KeyError(f"{key}.id", "required key is missing")
    values: dict[str, Any] = {}
    # A trainer script's command line and environment (refused for other campaigns in _check).
    command = {name: table[name] for name in FRESH_CAPTURE_KEYS if name in table}
    rest = {k: v for k, v in table.items() if k not in FRESH_CAPTURE_KEYS}
    for path, value in dimensions.flat_keys(rest):
        if path == "id":
            continue
        d = dimensions.for_variant_key(path)
        if d is None:
            raise _KeyError(f"{key}.{path}", dimensions.unknown_variant_key(path))
        if d.name in values:
            raise _KeyError(f"{key}.{path}", f"sets {d.name} a second time (as {d.name} and {d.spec_field})")
        values[d.name] = _convert(d.type, value, f"{key}.{path}")
    return VariantSpec(
        id=_convert(str, table["id"], f"{key}.id"),
        values=values,
        args=_convert(list[str], command.get("args", []), f"{key}.args"),
        env=_convert(dict[str, str], command.get("env", {}), f"{key}.env"),
    )


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


# --------------------------------------------------------------------------------------------
# Value rules: checked once, after types.


def _check(spec: CampaignSpec) -> None:
    def need(ok: bool, key: str, problem: str) -> None:
        if not ok:
            raise _KeyError(key, problem)

    t, b, s, o = spec.task, spec.batch, spec.split, spec.optim
    need(bool(spec.campaign.name.strip()), "campaign.name", "must not be empty")
    need(
        re.fullmatch(r"[A-Za-z0-9._-]+", spec.campaign.name) is not None,
        "campaign.name",
        "use letters, digits, '.', '_' or '-' (it names the record file)",
    )
    need(
        len(spec.campaign.name) <= MAX_NAME,
        "campaign.name",
        f"{len(spec.campaign.name)} characters; at most {MAX_NAME} (it names the record file)",
    )
    sources = [x for x in (t.builtin, t.file, t.trainer_script, t.trainer_module) if x]
    need(
        len(sources) == 1,
        "task",
        "set exactly one of task.builtin or task.file (or task.trainer_script, task.trainer_module)",
    )
    if t.captures_trainer:
        _check_trainer(spec)
    else:
        need(not t.args, "task.args", "only a task.trainer_script takes command-line arguments")
        need(not t.env, "task.env", "only a task.trainer_script takes environment variables")
        need(not t.given_args, "task.given_args", "only a task.trainer_script has arguments as given")
    need(t.group_kind in GROUP_KINDS, "task.group_kind", f"must be one of {', '.join(GROUP_KINDS)}")
    need(len(set(t.class_names)) == len(t.class_names), "task.class_names", "a name is used twice")
    need(all(r.strip() for r in t.requires), "task.requires", "a module name is empty")
    need(b.microbatch >= 1, "batch.microbatch", f"must be ≥ 1, got {b.microbatch}")
    need(b.accumulation >= 1, "batch.accumulation", f"must be ≥ 1, got {b.accumulation}")
    need(b.replicas >= 1, "batch.replicas", f"must be ≥ 1, got {b.replicas}")
    need(b.max_length >= 0, "batch.max_length", f"must be ≥ 0 (0 = the task's default), got {b.max_length}")
    for d in dimensions.DIMENSIONS:
        if d.choices:
            value = dimensions.control_value(spec, d)
            need(
                value in d.choices,
                d.spec_field,
                f"must be one of {', '.join(map(str, d.choices))}, got {value!r}",
            )
    need(b.hold in HOLDS, "batch.hold", f"must be one of {', '.join(HOLDS)}")
    need(b.device in DEVICES, "batch.device", f"must be one of {', '.join(DEVICES)}")
    if b.hold == "updates":
        need(b.updates >= 1, "batch.updates", "hold = 'updates' needs updates ≥ 1")
        need(b.epochs == 0, "batch.epochs", "hold = 'updates' fixes updates; leave epochs out")
    else:
        need(b.epochs >= 1, "batch.epochs", "hold = 'epochs' needs epochs ≥ 1")
        need(b.updates == 0, "batch.updates", "hold = 'epochs' fixes epochs; leave updates out")
    for name in ("train", "validation", "test"):
        need(0 <= getattr(s, name) <= 1, f"split.{name}", "must be between 0 and 1")
    need(s.train > 0, "split.train", "must be > 0")
    need(s.validation > 0, "split.validation", "must be > 0 (eval_longest needs a validation set)")
    total = s.train + s.validation + s.test
    need(abs(total - 1) < 1e-6, "split", f"train + validation + test must be 1, got {total:.6g}")
    need(o.lr > 0, "optim.lr", f"must be > 0, got {o.lr}")
    need(o.weight_decay >= 0, "optim.weight_decay", "must be ≥ 0")
    need(o.warmup_updates >= 0, "optim.warmup_updates", "must be ≥ 0")
    need(o.schedule in SCHEDULES, "optim.schedule", f"must be one of {', '.join(SCHEDULES)}")
    need(o.grad_clip >= 0, "optim.grad_clip", "must be ≥ 0 (0 = no clipping)")
    need(spec.phases.steady_updates >= 1, "phases.steady_updates", "must be ≥ 1")
    need(
        0 <= spec.phases.steady_precision < 1,
        "phases.steady_precision",
        "must be a fraction of the mean step time in [0, 1), e.g. 0.03 for ±3 % (0 times exactly steady_updates)",
    )
    need(spec.phases.steady_budget_s >= 0, "phases.steady_budget_s", "must be ≥ 0 seconds")
    need(spec.phases.steady_min_s >= 0, "phases.steady_min_s", "must be ≥ 0 seconds")
    need(spec.phases.eval_microbatch >= 0, "phases.eval_microbatch", "must be ≥ 0")
    known = phase_table.names()
    for name in spec.phases.skip:
        need(name in known, "phases.skip", f"unknown phase {name!r} (phases: {', '.join(known)})")
    for name, lim in spec.limits.items():
        _check_limit_name(name, known)
        need(lim.memory_mb >= 0, f"limits.{name}.memory_mb", "must be ≥ 0")
        need(lim.time_s >= 0, f"limits.{name}.time_s", "must be ≥ 0")
    need(spec.inspect.examples >= 1, "inspect.examples", "must be ≥ 1")
    ov = spec.overfit
    need(ov.examples >= 1, "overfit.examples", "must be ≥ 1")
    need(ov.max_steps >= 1, "overfit.max_steps", "must be ≥ 1")
    need(0 < ov.recover <= 1, "overfit.recover", "must be in (0, 1]")
    need(ov.lr > 0, "overfit.lr", "must be > 0")
    need(
        ov.loss_below > 0,
        "overfit.loss_below",
        f"must be > 0 (a loss never goes below 0), got {ov.loss_below}",
    )
    ids = [v.id for v in spec.variants]
    for i, v in enumerate(spec.variants):
        key = f"variants[{i}]"
        need(re.fullmatch(r"[A-Za-z0-9._-]+", v.id) is not None, f"{key}.id", "use letters, digits, . _ -")
        need(v.id != "control", f"{key}.id", "'control' names the campaign's own configuration")
        need(ids.count(v.id) == 1, f"{key}.id", f"id {v.id!r} is used twice")
        for name, value in v.values.items():
            why = dimensions.problem(dimensions.by_name(name), value)
            need(why is None, f"{key}.{name}", why or "")
        if t.captures_trainer:
            # The control's batch is the trainer's own, known once the script is captured.
            need(bool(v.values) or v.fresh_capture, key, f"variant {v.id!r} changes nothing from the control")
            _check_fresh_capture(v, t, key)
            for name in FRESH_CAPTURE_KEYS:
                need(
                    not getattr(v, name) or spec.distributed.strategy == "none",
                    f"{key}.{name}",
                    "a fresh-capture variant runs in one process of its own, not on the [distributed] "
                    "ranks yet: change microbatch, accumulation or activation_checkpointing only",
                )
            continue
        for name in FRESH_CAPTURE_KEYS:
            need(
                not getattr(v, name),
                f"{key}.{name}",
                "only a task.trainer_script's variant takes command-line arguments or environment variables",
            )
        # A dimension set to the control's own value changes nothing either (a duplicate measurement).
        changes = [
            value != dimensions.control_value(spec, dimensions.by_name(name))
            for name, value in v.values.items()
        ]
        need(any(changes), key, f"variant {v.id!r} changes nothing from the control")
    if spec.fit_search is not None:
        fs = spec.fit_search
        need(len(fs.microbatches) >= 1, "fit_search.microbatches", "declare at least one microbatch")
        need(all(m >= 1 for m in fs.microbatches), "fit_search.microbatches", "every microbatch must be ≥ 1")
        need(
            len(set(fs.microbatches)) == len(fs.microbatches),
            "fit_search.microbatches",
            "a value is listed twice",
        )
        need(all(m >= 1 for m in fs.max_lengths), "fit_search.max_lengths", "every max length must be ≥ 1")
        need(
            len(set(fs.max_lengths)) == len(fs.max_lengths),
            "fit_search.max_lengths",
            "a value is listed twice",
        )
        need(fs.memory_mb >= 0, "fit_search.memory_mb", "must be ≥ 0 (0 = the phase ceilings)")
    if spec.lr_board is not None:
        lr = spec.lr_board
        need(lr.control > 0, "lr_board.control", "must be > 0")
        need(all(x > 0 for x in lr.variants), "lr_board.variants", "every LR must be > 0")
        need(lr.control not in lr.variants, "lr_board.variants", "the control LR is listed again")
        need(len(set(lr.variants)) == len(lr.variants), "lr_board.variants", "an LR is listed twice")
        need(len(lr.seeds) >= 1, "lr_board.seeds", "declare at least one seed")
        need(len(set(lr.seeds)) == len(lr.seeds), "lr_board.seeds", "a seed is listed twice")
        names = [lr_run_name(x, 0) for x in (lr.control, *lr.variants)]
        need(
            len(set(names)) == len(names),
            "lr_board.variants",
            "two LRs give the same run name (they differ beyond 6 significant digits)",
        )
        need(lr.updates >= 1, "lr_board.updates", "must be ≥ 1")
        need(lr.validate_every >= 1, "lr_board.validate_every", "must be ≥ 1")
        need(lr.stop.explosion_factor > 1, "lr_board.stop.explosion_factor", "must be > 1")
        need(
            lr.stop.plateau_validations >= 0,
            "lr_board.stop.plateau_validations",
            "must be ≥ 0 (0 = no plateau stop)",
        )
    need(spec.resume.k >= 1, "resume.k", "must be ≥ 1")
    need(spec.resume.n >= 1, "resume.n", "must be ≥ 1")
    need(spec.resume.tolerance >= 0, "resume.tolerance", "must be ≥ 0")
    p = spec.plan
    need(p.dataset_size >= 0, "plan.dataset_size", "must be ≥ 0")
    need(p.epochs >= 1, "plan.epochs", "must be ≥ 1")
    need(0 <= p.headroom < 10, "plan.headroom", "must be a fraction ≥ 0")
    need(0 <= p.safety_margin < 10, "plan.safety_margin", "must be a fraction ≥ 0")
    need(p.gpus >= 1, "plan.gpus", "must be ≥ 1")
    need(p.evaluations >= 0, "plan.evaluations", "must be ≥ 0 (0 = one per epoch)")
    need(p.checkpoints >= 0, "plan.checkpoints", "must be ≥ 0 (0 = one per epoch)")
    need(p.validation_size >= 0, "plan.validation_size", "must be ≥ 0 (0 = from the split ratios)")
    need(len(set(p.priority)) == len(p.priority), "plan.priority", "a configuration is listed twice")
    _check_rental(p)
    e = spec.estimate
    need(e.strategy in ("", *STRATEGIES), "estimate.strategy", f"must be one of {', '.join(STRATEGIES)}")
    need(e.gpus >= 0, "estimate.gpus", "must be ≥ 1 (or left out: plan.gpus)")
    need(e.gpu_memory_gb >= 0, "estimate.gpu_memory_gb", "must be > 0 GB (or left out)")
    need(not (e.strategy == "none" and e.gpus > 1), "estimate.strategy", "'none' runs on one GPU")


def _check_rental(p: PlanSpec) -> None:
    """The `[plan]` keys of the whole rental (saves, evaluations, restarts, disk)."""
    for key in ("save_every", "keep", "eval_every", "eval_examples", "restarts"):
        if getattr(p, key) < 0:
            raise _KeyError(f"plan.{key}", "must be ≥ 0")
    if p.max_job_hours < 0:
        raise _KeyError("plan.max_job_hours", "must be ≥ 0 hours (0: no limit)")
    if p.save_every and p.checkpoints:
        raise _KeyError("plan.save_every", "set save_every or checkpoints, not both")
    if p.eval_every and p.evaluations:
        raise _KeyError("plan.eval_every", "set eval_every or evaluations, not both")
    if p.eval_examples and p.validation_size:
        raise _KeyError("plan.eval_examples", "set eval_examples or validation_size, not both")


# --------------------------------------------------------------------------------------------
# A trainer script: its own arguments decide the batch, the optimizer and the splits.

# Sections a trainer campaign takes from the captured trainer instead: each is refused with why.
TRAINER_OWNS = {
    "split": "the script's train_dataset and eval_dataset are the splits",
    "optim": "the optimizer, LR and schedule are the trainer's (its TrainingArguments)",
}
# `[distributed]` keys a trainer campaign refuses, with why: the trainer wraps its own model
# (DDP through accelerate), so the pilot only launches its ranks.
TRAINER_DISTRIBUTED_REFUSED = {
    "checkpoint": "the trainer's own checkpoint code saves (save_only_model, save_safetensors in task.args)",
    "nnodes": "a captured trainer runs on one node for now",
    "rdzv_endpoint": "a captured trainer runs on one node for now",
}
# Batch keys a trainer campaign may still set: where it runs.
TRAINER_BATCH_KEYS = ("device",)
# What a memory variant of a captured trainer may change: what `trainer.args` takes in place, and
# the script's command line and environment (a fresh capture: what its constructor fixes).
TRAINER_VARIANT_KEYS = ("id", "microbatch", "accumulation", "activation_checkpointing", *FRESH_CAPTURE_KEYS)


def _check_env(env: dict[str, str], key: str) -> None:
    for name, value in env.items():
        # Named by the table's key: an inline table's own keys have no line of their own.
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise _KeyError(key, f"{name!r} is not a valid environment variable name")
        if "\0" in value:
            raise _KeyError(key, f"the value of {name} holds a NUL character")


def _check_fresh_capture(v: VariantSpec, task: TaskSpec, key: str) -> None:
    """A variant's `args` follow `task.args` on the command line (argparse and HfArgumentParser
    keep the last occurrence of a flag): a list repeating `task.args` means the other shape."""
    _check_env(v.env, f"{key}.env")
    if task.args and v.args[: len(task.args)] == task.args:
        raise _KeyError(
            f"{key}.args",
            "is appended to task.args (the last occurrence of a flag wins): list only what the variant "
            "changes, not task.args again",
        )
    if any("\0" in a for a in v.args):
        raise _KeyError(f"{key}.args", "an argument holds a NUL character")


def _check_trainer(spec: CampaignSpec) -> None:
    t = spec.task
    for key in ("file", "function", "options", "group_key"):
        default = getattr(TaskSpec(), key)
        if getattr(t, key) != default:
            raise _KeyError(f"task.{key}", "not used with task.trainer_script (the script builds everything)")
    if t.trainer_module and not MODULE_NAME.fullmatch(t.trainer_module):
        raise _KeyError(
            "task.trainer_module", f"a module name as `python -m` takes it, got {t.trainer_module!r}"
        )
    _check_env(t.env, "task.env")


def _trainer_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A trainer campaign's raw tables before typing: sections the trainer owns are refused and
    `[batch]` gets placeholders the runner replaces with the trainer's own figures."""
    task = raw.get("task")
    if not isinstance(task, dict) or not (task.get("trainer_script") or task.get("trainer_module")):
        return raw
    for section, why in TRAINER_OWNS.items():
        if section in raw:
            raise _KeyError(section, f"not used with task.trainer_script: {why}")
    _trainer_distributed(raw.get("distributed", {}))
    fit = raw.get("fit_search")
    if isinstance(fit, dict) and "max_lengths" in fit:
        raise _KeyError(
            "fit_search.max_lengths",
            "not used with task.trainer_script: the script tokenises (and cuts) its rows before the "
            "capture, so a captured trainer's fit search tries microbatches only",
        )
    variants = raw.get("variants", [])
    for i, v in enumerate(variants if isinstance(variants, list) else []):
        for key in v if isinstance(v, dict) else {}:
            if key not in TRAINER_VARIANT_KEYS:
                raise _KeyError(
                    f"variants[{i}].{key}",
                    "a captured trainer's variant changes microbatch, accumulation or "
                    "activation_checkpointing in place, or the script's args / env (a fresh capture: "
                    'e.g. args = ["--bf16"] for the precision)',
                )
    batch = raw.get("batch", {})
    if not isinstance(batch, dict):
        raise _KeyError("batch", f"expected a table, got {_describe(batch)}")
    for key in batch:
        if key not in TRAINER_BATCH_KEYS:
            raise _KeyError(
                f"batch.{key}",
                "not used with task.trainer_script: the batch is the trainer's arguments "
                "(per_device_train_batch_size, gradient_accumulation_steps, max_steps)",
            )
    return raw | {"batch": {"microbatch": 1, "updates": 1, **batch}}


def _trainer_distributed(d: Any) -> None:
    """A trainer campaign's `[distributed]`: strategy 'ddp' launches its ranks; the trainer's
    FSDP is the script's own arguments, so the pilot's 'fsdp' (its own sharding) is refused."""
    if not isinstance(d, dict):
        return  # typed (and refused) with the other sections
    if d.get("strategy") == "fsdp":
        raise _KeyError(
            "distributed.strategy",
            "a captured trainer shards as its TrainingArguments say (--fsdp ... in task.args), not by "
            "the pilot: use strategy = 'ddp' to launch its ranks (FSDP through the trainer is not piloted yet)",
        )
    for key, why in TRAINER_DISTRIBUTED_REFUSED.items():
        if key in d and not (key == "nnodes" and d[key] == 1):
            raise _KeyError(f"distributed.{key}", f"not used with task.trainer_script: {why}")


# --------------------------------------------------------------------------------------------
# [distributed]: kept in one block so the world-size rule lives in one place.


def _check_distributed(spec: CampaignSpec, replicas_declared: bool) -> None:
    def need(ok: bool, key: str, problem: str) -> None:
        if not ok:
            raise _KeyError(key, problem)

    d, b = spec.distributed, spec.batch
    need(d.strategy in STRATEGIES, "distributed.strategy", f"must be one of {', '.join(STRATEGIES)}")
    need(d.nproc_per_node >= 0, "distributed.nproc_per_node", "must be ≥ 1 (or 0 for the default)")
    need(d.backend in BACKENDS, "distributed.backend", "must be 'nccl' or 'gloo' (or left out)")
    need(d.timeout_s > 0, "distributed.timeout_s", "must be > 0")
    need(d.allreduce_mb >= 0, "distributed.allreduce_mb", "must be ≥ 0 (0 = the default size)")
    need(0 < d.data_wait_warn <= 1, "distributed.data_wait_warn", "must be a share in (0, 1]")
    need(d.checkpoint in ("", "sharded", "full"), "distributed.checkpoint", "must be 'sharded' or 'full'")
    need(d.nnodes >= 1, "distributed.nnodes", "must be ≥ 1")
    need(d.join_timeout_s > 0, "distributed.join_timeout_s", "must be > 0")
    if d.nnodes > 1:
        need(d.strategy != "none", "distributed.nnodes", "several nodes need strategy ddp or fsdp")
        need(
            endpoint_ok(d.rdzv_endpoint),
            "distributed.rdzv_endpoint",
            "must be 'host:port' (this node's address as the other nodes reach it) when nnodes > 1",
        )
    need(b.num_workers >= 0, "batch.num_workers", "must be ≥ 0")
    if d.strategy == "none":
        need(
            d.nproc_per_node <= 1, "distributed.nproc_per_node", "several processes need strategy ddp or fsdp"
        )
        need(b.replicas == 1, "batch.replicas", "replicas > 1 needs [distributed] strategy = 'ddp' or 'fsdp'")
    elif d.nproc_per_node:
        nodes = f" × nnodes {d.nnodes}" if d.nnodes > 1 else ""
        need(
            b.replicas == d.world or not replicas_declared,
            "batch.replicas",
            f"is {b.replicas} but distributed.nproc_per_node is {d.nproc_per_node}{nodes}: replicas is the "
            "world size (leave it out, or make them equal)",
        )
    for i, v in enumerate(spec.variants):
        if v.get("strategy"):
            need(v.get("strategy") in ("ddp", "fsdp"), f"variants[{i}].strategy", "must be 'ddp' or 'fsdp'")
            need(d.strategy != "none", f"variants[{i}].strategy", "needs [distributed] strategy ddp or fsdp")


def _resolve_world(spec: CampaignSpec) -> CampaignSpec:
    """batch.replicas becomes the world size: nproc_per_node when only that is declared."""
    d = spec.distributed
    if d.strategy != "none" and d.nproc_per_node and spec.batch.replicas != d.world:
        return dataclasses.replace(spec, batch=dataclasses.replace(spec.batch, replicas=d.world))
    if d.strategy != "none" and not d.nproc_per_node and spec.batch.replicas > 1:
        per_node = max(1, spec.batch.replicas // d.nnodes)
        return dataclasses.replace(spec, distributed=dataclasses.replace(d, nproc_per_node=per_node))
    return spec


def endpoint_ok(endpoint: str) -> bool:
    """'host:port' with a port in 1..65535 (an IPv6 host in brackets: '[::1]:29400')."""
    host, sep, port = endpoint.rpartition(":")
    return bool(sep and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536)


def _check_limit_name(name: str, phases: tuple[str, ...]) -> None:
    """`[limits.NAME]`: a misspelled phase would silently drop its ceiling, so it is refused."""
    if name == "default" or name in phases:
        return
    close = difflib.get_close_matches(name, [*phases, "default"], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise _KeyError(f"limits.{name}", f"unknown phase ({hint}phases: default, {', '.join(phases)})")


def _line_of(text: str, key: str) -> int | None:
    """Best-effort line of a dotted key in the TOML text (for messages, not for parsing)."""
    parts = re.sub(r"\[\d+\]", "", key).split(".")
    table: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.fullmatch(r"\[\[?\s*([^\]]+?)\s*\]\]?", stripped)
        if header:
            table = [p.strip() for p in header.group(1).split(".")]
            if table == parts:
                return number
            continue
        match = re.match(r"([A-Za-z0-9_.\"-]+)\s*=", stripped)
        if match:
            path = table + [p.strip('"') for p in match.group(1).split(".")]
            if path == parts or (len(parts) > len(table) and path[: len(parts)] == parts):
                return number
            # An inline table (`options = { n = 1 }`): the line that opens it and names the key.
            if (
                len(path) < len(parts)
                and parts[: len(path)] == path
                and re.search(rf"\b{re.escape(parts[-1])}\s*=", line)
            ):
                return number
    # Fall back to the table itself (e.g. a missing key: point at its section).
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.fullmatch(r"\[\[?\s*([^\]]+?)\s*\]\]?", line.strip())
        if header and [p.strip() for p in header.group(1).split(".")] == parts[:-1]:
            return number
    return None


def parse_spec(text: str, path: Path) -> LoadedSpec:
    """Parse and validate campaign text; raise SpecError with file, key and line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: TOML syntax error: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: arrays or tables nested too deeply to be a campaign") from None
    try:
        spec = _build(CampaignSpec, _trainer_raw(_new_names(raw)), "")
        _check(spec)
        _check_distributed(spec, "replicas" in raw.get("batch", {}))
        spec = _resolve_world(spec)
    except _KeyError as exc:
        line = _line_of(text, exc.key)
        where = f"line {line}: " if line else ""
        raise SpecError(f"{path}: {where}{exc.key}: {exc.problem}") from None
    return LoadedSpec(spec=spec, path=path.resolve(), text=text, raw=raw)


def _new_names(raw: dict[str, Any]) -> dict[str, Any]:
    """The campaign's tables under today's names: `[control]` is read as `[replay]`."""
    if OLD_REPLAY_SECTION not in raw:
        return raw
    if "replay" in raw:
        raise _KeyError(OLD_REPLAY_SECTION, "the old name of [replay]: keep only [replay]")
    old = raw[OLD_REPLAY_SECTION]
    if not isinstance(old, dict):
        raise _KeyError(OLD_REPLAY_SECTION, f"expected a table, got {_describe(old)}")
    # Built under its own name so that an error in it names the key the file holds.
    replay = _build(ReplaySpec, old, OLD_REPLAY_SECTION)
    return {k: v for k, v in raw.items() if k != OLD_REPLAY_SECTION} | {"replay": dataclasses.asdict(replay)}


# A campaign file is a page of TOML; anything this large is a mistake (or /dev/zero).
MAX_SPEC_BYTES = 1 << 20


def read_campaign_text(p: Path) -> str:
    """The campaign file's text, refusing what is not a regular file of sane size (R24).

    A FIFO would block the read forever and `/dev/zero` would fill the memory: the file is
    checked after opening (no race with a swap), non-blocking, and read with a bound.
    """
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SpecError(f"{p}: campaign file not found") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read campaign file: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SpecError(f"{p}: not a regular file (a campaign is a TOML file)")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{p}: {st.st_size:,} bytes; a campaign file is at most {MAX_SPEC_BYTES:,}")
        try:
            data = fh.read(MAX_SPEC_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{p}: cannot read campaign file: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{p}: more than {MAX_SPEC_BYTES:,} bytes; a campaign file is at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not UTF-8 text (byte {exc.start}): a campaign is a TOML file") from None


def load_spec(path: str | Path) -> LoadedSpec:
    """Read a campaign file from disk."""
    p = Path(path)
    text = read_campaign_text(p)
    loaded = parse_spec(text, p)
    if loaded.spec.task.file and not loaded.resolve(loaded.spec.task.file).is_file():
        line = _line_of(text, "task.file")
        where = f"line {line}: " if line else ""
        raise SpecError(f"{p}: {where}task.file: no such file {loaded.spec.task.file!r}")
    script = loaded.spec.task.trainer_script
    if script:
        line = _line_of(text, "task.trainer_script")
        where = f"{p}: {f'line {line}: ' if line else ''}task.trainer_script"
        found = loaded.program_path()
        if found is None:
            raise SpecError(f"{where}: no such file {script!r} (nor a console command of that name)")
        if not runs_python(str(found)):
            raise SpecError(
                f"{where}: {script!r} is not a Python program (a .py file, or a console command whose "
                "first line runs python)"
            )
    return loaded
