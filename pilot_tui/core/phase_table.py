"""Every phase a campaign can run, in campaign order, with its bookkeeping (pure, no torch).

One table, from which the steps of a campaign (`steps.py`), the plan's gates (`plan.py`), the
memory variants (`variants.py`), headless's fail-fast rule and the dashboard's panes all derive.
The runner's `@phase` registry is checked against it when the phases are imported: a body without
an entry, or an entry without a body, is an error at start, not a silent gap.

Adding a phase: write its module under `runner/phases/` with `@phase("name")`, add one
`PhaseInfo` here (or `register()` it, as a plugin or a test does), document it. Nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# Groups in campaign order. `variants` holds no phase of its own: it repeats the `per_variant`
# phases once per declared memory variant, right after the engine group.
GROUPS = ("stack", "data", "engine", "variants", "search", "board", "closing")


@dataclass(frozen=True)
class PhaseInfo:
    """What the rest of the tool needs to know about one phase.

    - `group`: where it sits in the campaign (see GROUPS); `search` runs only when the campaign
      declares `[fit_search]`, `board` once per LR run of `[lr_board]`.
    - `per_variant`: re-measured for every memory variant (R11); these are a variant's gates.
    - `control_gate`: the control must pass it to be kept in the plan (R18).
    - `plan_blocker`: a failure makes the plan not worth renting for (a campaign that cannot
      save, export, resume or reload cannot run for days).
    - `fail_fast`: a failure stops the campaign's later steps (headless and the dashboard's
      "run all" alike), unless the user asks to keep going.
    - `pane`: the dashboard pane that shows this phase's details beyond the Gates table.
    - `on_ranks`: under `[distributed]` (ddp/fsdp), it runs on every rank under torchrun; the
      others run in the runner's one process with the ranks folded into the accumulation.
    - `first_step`: what to do first when it fails, where the plan says it is blocked (a row may
      say better: its `details.first_step`, from what it measured).
    """

    name: str
    group: str
    summary: str
    doc: str = ""
    per_variant: bool = False
    control_gate: bool = False
    plan_blocker: bool = False
    fail_fast: bool = False
    pane: str = "gates"
    on_ranks: bool = False
    first_step: str = ""

    def __post_init__(self) -> None:
        if self.group not in GROUPS or self.group == "variants":
            raise ValueError(f"phase {self.name!r}: unknown group {self.group!r}")


_TABLE: list[PhaseInfo] = [
    PhaseInfo(
        "stack",
        "stack",
        "python, torch, CUDA/cuDNN, GPUs, bf16, attention backends, NCCL, the task's extensions",
        "docs/plan.md",
        fail_fast=True,
    ),
    PhaseInfo(
        "inspect",
        "data",
        "examples token by token as the loss sees them; supervision, truncation, class mapping",
        "docs/checks.md",
        pane="batch",
    ),
    PhaseInfo("split", "data", "no group and no identical example in two splits", "docs/checks.md"),
    PhaseInfo("overfit", "data", "a tiny subset is learnt and argmax recovers its labels", "docs/checks.md"),
    # Which machine: per-GPU memory of every configuration under fake tensors (nothing allocated,
    # no weight loaded), before the load (R23). Last of the data checks: on a CPU runner it
    # computes in a fork beside them (runner/phases/estimate.py), and they are never timed.
    PhaseInfo(
        "estimate",
        "data",
        "per-GPU memory of each configuration under fake tensors, before any weight is loaded",
        "docs/estimate.md",
    ),
    # The rented machine itself: its disks, shared memory and cores against what the run needs, its
    # GPUs against their datasheets, their peers and the link NVML reports (R30). After the
    # estimate, which says what a checkpoint holds; before anything long runs on the machine.
    PhaseInfo(
        "machine",
        "data",
        "the machine: disks, /dev/shm and cores against the run's needs; GPUs against datasheets and peers",
        "docs/machine.md",
    ),
    PhaseInfo(
        "load",
        "engine",
        "build the model and load the weights",
        "docs/engine.md",
        control_gate=True,
        on_ranks=True,
    ),
    PhaseInfo(
        "first_step",
        "engine",
        "the first optimizer update (it allocates optimizer state)",
        "docs/engine.md",
        per_variant=True,
        control_gate=True,
        on_ranks=True,
    ),
    PhaseInfo(
        "steady",
        "engine",
        "timed steady updates",
        "docs/engine.md",
        per_variant=True,
        control_gate=True,
        on_ranks=True,
    ),
    PhaseInfo(
        "eval_longest",
        "engine",
        "evaluation on the longest validation sequences",
        "docs/engine.md",
        per_variant=True,
        control_gate=True,
        on_ranks=True,
    ),
    PhaseInfo(
        "save",
        "engine",
        "a full training checkpoint",
        "docs/engine.md",
        plan_blocker=True,
        on_ranks=True,
        first_step="read the save row's error: the file it could not write, or the state the checkpoint lacks",
    ),
    PhaseInfo(
        "export",
        "engine",
        "the artifact meant for evaluation",
        "docs/engine.md",
        plan_blocker=True,
        on_ranks=True,
        first_step="read the export row: the weights or configuration the artifact lacks, then run export and final again",
    ),
    PhaseInfo(
        "fit_search", "search", "the largest microbatch (and max length) that fits", "docs/variants.md"
    ),
    PhaseInfo(
        "lr_run",
        "board",
        "one LR run of the board: fixed budget, declared stop causes",
        "docs/board.md",
        pane="board",
    ),
    PhaseInfo(
        "resume",
        "closing",
        "resume in a new process against an uninterrupted run",
        "docs/resume.md",
        plan_blocker=True,
        on_ranks=True,
        first_step=(
            "read the resume row's first differing update and what differs (a learning rate: the schedule "
            "was not restored; a batch: the data position; weights alone: an RNG), then run resume alone "
            "(phases.skip) to rule out a phase before it"
        ),
    ),
    PhaseInfo(
        "final",
        "closing",
        "reload the export and replay the replay inputs",
        "docs/resume.md",
        plan_blocker=True,
        on_ranks=True,
        first_step="read the final row: the replayed input whose output changed after the reload, or why the reload failed",
    ),
]


def register(info: PhaseInfo) -> PhaseInfo:
    """Add a phase at the end of its group (a plugin's or a test's phase); names stay unique."""
    if any(p.name == info.name for p in _TABLE):
        raise ValueError(f"phase {info.name!r} is already in the table")
    last = max(
        (i for i, p in enumerate(_TABLE) if GROUPS.index(p.group) <= GROUPS.index(info.group)), default=-1
    )
    _TABLE.insert(last + 1, info)
    return info


def unregister(name: str) -> None:
    """Remove a phase added with `register` (tests clean up after themselves)."""
    _TABLE[:] = [p for p in _TABLE if p.name != name]


def phases() -> Iterator[PhaseInfo]:
    """Every phase, in campaign order."""
    return iter(list(_TABLE))


def info(name: str) -> PhaseInfo | None:
    return next((p for p in _TABLE if p.name == name), None)


def names() -> tuple[str, ...]:
    """Every phase name a campaign can name (in `phases.skip`, `limits.PHASE`), in order."""
    return tuple(p.name for p in _TABLE)


def in_group(group: str) -> tuple[str, ...]:
    return tuple(p.name for p in _TABLE if p.group == group)


def per_variant() -> tuple[str, ...]:
    """The phases a memory variant re-measures, in order: a variant's gates (R11)."""
    return tuple(p.name for p in _TABLE if p.per_variant)


def control_gates() -> tuple[str, ...]:
    """The phases the control must pass to be kept (R18)."""
    return tuple(p.name for p in _TABLE if p.control_gate)


def gates_for(config: str) -> tuple[str, ...]:
    """The memory gates of a configuration: the control's, or a variant's."""
    return control_gates() if config == "control" else per_variant()


def on_ranks() -> tuple[str, ...]:
    """The phases that run on every rank of a ddp/fsdp campaign (the others in one process)."""
    return tuple(p.name for p in _TABLE if p.on_ranks)


def plan_blockers() -> tuple[str, ...]:
    return tuple(p.name for p in _TABLE if p.plan_blocker)


def stops_campaign(name: str, verdict: str) -> bool:
    """Whether this phase's verdict stops the later steps (fail fast, R18)."""
    p = info(name)
    return p is not None and p.fail_fast and verdict == "fail"


def check_registry(bodies: set[str]) -> None:
    """The runner's phase bodies and this table name the same phases, or the runner refuses to start."""
    table = set(names())
    missing, extra = sorted(table - bodies), sorted(bodies - table)
    problems = []
    if missing:
        problems.append(f"in the phase table without a body: {', '.join(missing)}")
    if extra:
        problems.append(f"phase bodies without a table entry: {', '.join(extra)}")
    if problems:
        raise RuntimeError("phase registry and phase table disagree: " + "; ".join(problems))


def lr_run_name(lr: float, seed: int) -> str:
    """The base name of an LR run; the record adds an attempt number that is never reused."""
    mantissa, exponent = f"{lr:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"lr{mantissa}e{int(exponent)}-s{seed}"
