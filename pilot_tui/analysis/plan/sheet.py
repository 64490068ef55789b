"""The choice sheet (R18): each configuration's gates, the one kept and why, what it needs per GPU.

Nothing is assumed that was not measured: a configuration is kept only when the stack check (its
precision included) and every one of its memory gates passed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...core import phase_table
from ...core.rows import num
from .inputs import Facts, Rows, memory_basis, number_at, own_rows, step_key, text

COMMON_GPU_GB = (24, 40, 48, 80, 141)


@dataclass(frozen=True)
class Configuration:
    """One configuration on the sheet: its batch, its measured peak, and whether it passes."""

    id: str
    passes: bool
    reason: str
    precision: str
    microbatch: int
    accumulation: int
    replicas: int
    effective_batch: int
    max_length: int
    peak_mb: float
    memory_per_gpu_mb: float
    step_time_s: float | None = None
    # Known only for the variants `[[variants]]` judged (R12); None for the control.
    changes_question: bool | None = None
    question_note: str | None = None
    # kept | passes | rejected
    status: str = ""


@dataclass(frozen=True)
class GpuNeed:
    """Per-GPU memory a CUDA rental needs: peak reserved + the CUDA context NVML sees, + headroom."""

    peak_reserved_mb: float
    cuda_context_mb: float
    need_mb: float
    smallest_gpu_gb: int


@dataclass(frozen=True)
class ChoiceSheet:
    """R18: memory per GPU, largest dimensions that passed, the configuration kept and why."""

    kept: str
    kept_reason: str
    blocked_by: tuple[str, ...]
    untested: tuple[str, ...]
    skipped_checks: tuple[str, ...]
    memory_basis: str
    peak_mb: float
    headroom: float
    memory_per_gpu_mb: float
    max_microbatch_passed: int
    max_length_passed: int
    max_dims_source: str
    precision: str
    microbatch: int
    accumulation: int
    replicas: int
    effective_batch: int
    max_length: int
    distribution: str
    gpus: int
    expected_result: str
    stack_status: str
    stack_reason: str
    device: str
    torch: str
    cuda: str
    gpu_names: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    memory_caption: str = ""
    shown_for: str | None = None
    memory_note: str | None = None
    gpu_need: GpuNeed | None = None

    def configuration(self, config: str) -> Configuration | None:
        return next((c for c in self.configurations if c.id == config), None)


def assess(config: str, facts: Facts) -> Configuration:
    """One configuration's gates: the stack (its precision included) and every memory phase."""
    rows, stack, headroom = facts.rows, facts.stack, facts.spec.plan.headroom
    gates = phase_table.gates_for(config)
    own = {p: rows[step_key(p, config)] for p in gates if step_key(p, config) in rows}
    # The batch as the steady phase ran it, else as the first gate that ran did.
    steady = own.get("steady")
    source = steady if steady is not None and steady.params else next(iter(own.values()), None)
    params = source.params if source is not None else {}
    problems: list[str] = []
    if stack.status == "missing":
        problems.append("stack not checked (the stack phase did not run)")
    elif stack.status == "fail":
        problems.append(f"stack check failed: {stack.reason}")
    precision = text(params, "precision")
    if precision and stack.status != "missing":
        ok, why = stack.precision_ok(precision)
        if not ok:
            problems.append(f"precision {precision} not supported: {why}")
    for p in gates:
        row = own.get(p)
        if row is None:
            problems.append(f"{step_key(p, config)} not measured")
        elif not row.ok:
            problems.append(f"{step_key(p, config)} failed: {row.reason}")
    peak = max((row.memory.peak() or 0.0 for row in own_rows(config, rows)), default=0.0)
    question = facts.questions.get(config)
    return Configuration(
        id=config,
        passes=not problems,
        reason="; ".join(problems) if problems else "stack and memory gates passed",
        precision=precision,
        microbatch=int(num(number_at(params, "microbatch"))),
        accumulation=int(num(number_at(params, "accumulation"))),
        replicas=int(num(number_at(params, "replicas"), 1)),
        effective_batch=int(num(number_at(params, "effective_batch"))),
        max_length=int(num(number_at(params, "max_length"))),
        peak_mb=round(peak, 1),
        memory_per_gpu_mb=round(peak * (1 + headroom), 1),
        step_time_s=number_at(steady.details, "step_time_s") if steady is not None else None,
        changes_question=question.changes_question if question else None,
        question_note=question.note if question and question.changes_question else None,
    )


def largest_passed(facts: Facts) -> tuple[int, int, str]:
    """(microbatch, max length, source): the largest seen passing, from rows and the `[fit]` search.

    A configuration counts only when every one of its memory gates ran and passed: a first step
    that passed before its eval on the longest sequences ran out of memory did not pass.
    """
    rows = facts.rows
    mbs, lengths = [], []
    # Only the memory gates: other phases (overfit, fit_search, lr_run) carry their own sizes.
    configs = {r.variant for r in rows.values() if r.name in phase_table.control_gates()}
    for config in configs:
        gates = [rows.get(step_key(p, config)) for p in phase_table.gates_for(config)]
        if any(row is None or not row.ok for row in gates):
            continue
        for row in gates:
            assert row is not None
            if "microbatch" in row.params:
                mbs.append(int(row.param("microbatch")))
            if "max_length" in row.params:
                lengths.append(int(row.param("max_length")))
    sources = ["passing rows"] if mbs else []
    if facts.fit.found:
        sources.append("[fit] search")
        if facts.fit.largest_microbatch is not None:
            mbs.append(facts.fit.largest_microbatch)
        if facts.fit.max_length is not None:
            lengths.append(facts.fit.max_length)
    return max(mbs, default=0), max(lengths, default=0), " + ".join(sources) if sources else "nothing passed"


def blockers(rows: Rows) -> tuple[list[str], list[str]]:
    """(failed, not run) among the phases a multi-day run cannot do without (save, export,
    resume, final): a failure blocks the plan, a phase not run qualifies it."""
    failed, missing = [], []
    for phase in phase_table.plan_blockers():
        row = rows.get(phase)
        if row is None:
            missing.append(phase)
        elif not row.ok:
            # The cause the row measured, then the first thing to do: the row's own where it knows
            # better (a trainer's known cause), else the phase table's.
            first = str(row.details.get("first_step") or "") or phase_table.info(phase).first_step
            failed.append(f"{phase} failed: {row.reason}" + (f" — first: {first}" if first else ""))
    return failed, missing


def gpu_size(need_mb: float) -> int:
    """The smallest common GPU memory size (GB) that holds `need_mb`; 0 when none of them does."""
    return next((gb for gb in COMMON_GPU_GB if need_mb <= gb * 1024), 0)


def gpu_need(rows: Rows, config: str, headroom: float) -> GpuNeed | None:
    """Per-GPU memory the rental needs on CUDA: peak reserved + the CUDA context NVML sees, + headroom.

    The context is NVML's used memory minus the allocator's reserved at the same reading (on a GPU
    no other process shares). None on CPU: there is no GPU figure to give.
    """
    peak, context = 0.0, 0.0
    for row in own_rows(config, rows):  # its own configuration's rows, as the sheet's peak
        if not row.memory.on_cuda:
            continue
        peak = max(peak, row.memory.peak() or 0.0)
        memory = row.memory.values
        if "nvml_used_mb" in memory:
            context = max(context, num(memory["nvml_used_mb"]) - num(number_at(memory, "reserved_mb")))
    if peak <= 0:
        return None
    need = (peak + context) * (1 + headroom)
    return GpuNeed(round(peak, 1), round(context, 1), round(need, 1), gpu_size(need))


def memory_caption(sheet: ChoiceSheet) -> str:
    """The memory figure, saying what it is in its first words."""
    gpu = sheet.gpu_need
    if gpu:
        size = f"{gpu.smallest_gpu_gb} GB GPU" if gpu.smallest_gpu_gb else "more than 141 GB per GPU"
        return (
            f"per-GPU memory incl. CUDA context (NVML) {gpu.need_mb:.0f} MiB = peak reserved "
            f"{gpu.peak_reserved_mb:.0f} + context {gpu.cuda_context_mb:.0f}, +{sheet.headroom:.0%} "
            f"headroom: smallest common size {size}"
        )
    if sheet.memory_basis.startswith("peak RSS"):
        return (
            f"runner process peak RSS on CPU — not GPU memory: {sheet.peak_mb:.0f} MiB "
            f"(+{sheet.headroom:.0%} headroom = {sheet.memory_per_gpu_mb:.0f} MiB)"
        )
    return f"{sheet.memory_basis}: {sheet.memory_per_gpu_mb:.0f} MiB per GPU with headroom"


def _kept_reason(
    facts: Facts,
    order: list[str],
    by_id: dict[str, Configuration],
    kept: Configuration | None,
    failed: list[str],
) -> str:
    plan, basis = facts.spec.plan, memory_basis(facts.rows)
    candidate = next((by_id[c] for c in order if by_id[c].passes), None)
    if kept is not None:
        first = order.index(kept.id) == 0
        why = "first in priority order" if first else "first in priority order that passed"
        before = [f"{c}: {by_id[c].reason}" for c in order[: order.index(kept.id)]]
        reason = (
            f"{why}; stack {facts.stack.status}, every memory gate passed, needs "
            f"{kept.memory_per_gpu_mb:.0f} MiB per GPU ({basis}, +{plan.headroom:.0%} headroom)"
        )
        if kept.changes_question:
            # R12: kept because it came first in priority, but it is not the control's experiment.
            reason += f"; it changes the question: {kept.question_note or ''}"
        if before:
            reason += "; before it: " + "; ".join(before)
        return reason
    if failed:
        would = f" ({candidate.id} passes its memory gates)" if candidate else ""
        return (
            "no configuration kept: the campaign cannot run for days as it is — " + "; ".join(failed) + would
        )
    return "no configuration kept: " + "; ".join(f"{c.id}: {c.reason}" for c in by_id.values())


def choice_sheet(facts: Facts) -> ChoiceSheet:
    """R18: memory per GPU, largest dimensions that passed, the configuration kept and why."""
    spec, rows, stack = facts.spec, facts.rows, facts.stack
    plan = spec.plan
    assessed = [assess(c, facts) for c in facts.configurations]
    by_id = {a.id: a for a in assessed}
    order = [p for p in plan.priority if p in by_id] + [a.id for a in assessed if a.id not in plan.priority]
    failed, not_run = blockers(rows)
    skipped = set(spec.phases.skip)
    candidate = next((by_id[c] for c in order if by_id[c].passes), None)
    # A campaign that cannot save, export, resume or reload is not a plan for days of rental.
    kept = candidate if not failed else None
    reason = _kept_reason(facts, order, by_id, kept, failed)
    assessed = [
        dataclasses.replace(
            a,
            status="kept" if kept is not None and a.id == kept.id else ("passes" if a.passes else "rejected"),
        )
        for a in assessed
    ]
    shown = kept or candidate or by_id["control"]
    env = facts.environment
    gpus = stack.gpus or env.gpus
    mb, length, source = largest_passed(facts)
    sheet = ChoiceSheet(
        kept=kept.id if kept else "",
        kept_reason=reason,
        blocked_by=tuple(failed),
        untested=tuple(p for p in not_run if p not in skipped),
        skipped_checks=tuple(p for p in not_run if p in skipped),
        memory_basis=memory_basis(rows),
        peak_mb=shown.peak_mb,
        headroom=plan.headroom,
        memory_per_gpu_mb=shown.memory_per_gpu_mb,
        max_microbatch_passed=mb,
        max_length_passed=length,
        max_dims_source=source,
        precision=shown.precision or spec.batch.precision,
        microbatch=shown.microbatch or spec.batch.microbatch,
        accumulation=shown.accumulation or spec.batch.accumulation,
        replicas=shown.replicas,
        # Unmeasured (control not kept, no rows): the declared product, like the batch figures above.
        effective_batch=shown.effective_batch
        or spec.batch.microbatch * spec.batch.accumulation * spec.batch.replicas,
        max_length=shown.max_length,
        distribution=plan.distribution,
        gpus=plan.gpus,
        expected_result=plan.expected_result,
        stack_status=stack.status,
        stack_reason=stack.reason,
        device=env.device if "device" in env.present else stack.device,
        torch=stack.torch or env.torch,
        cuda=stack.cuda or env.cuda,
        gpu_names=tuple(g.name for g in gpus),
        configurations=tuple(assessed),
        shown_for=f"{shown.id} (not kept)" if kept is None else None,
        gpu_need=gpu_need(rows, kept.id if kept else "control", plan.headroom),
    )
    if gpus and kept is not None:
        smallest = min(g.memory_mb for g in gpus)
        if smallest and kept.memory_per_gpu_mb > smallest:
            sheet = dataclasses.replace(
                sheet,
                memory_note=f"with headroom it needs {kept.memory_per_gpu_mb:.0f} MiB, more than this GPU's "
                f"{smallest:.0f} MiB: rent a larger one or lower the headroom knowingly",
            )
    return dataclasses.replace(sheet, memory_caption=memory_caption(sheet))
