"""The package plan (R19): the priority configurations, projected from their measured durations and
fitted into the smallest 3/7/30-day package, in priority order.

No speed-up is assumed that was not measured: not from more GPUs, not from another device, not
from a cheaper evaluation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...core.accounting import account
from ...core.rows import PhaseRow
from ...core.spec import CampaignSpec
from ...core.verdict import FAIL
from ..step_time import pilot_speeds, run_spread, step_range
from .inputs import Facts, step_key
from .jobs import JobPlan, job_plan
from .rental import Disk, Restart, SaveTimeout, Throughput, disk, restart, save_timeout, throughput
from .sheet import ChoiceSheet, Configuration

DAY_S = 86_400.0
PACKAGES = (3, 7, 30)
# A steady phase whose slow updates are this many times its median is flagged as uneven.
UNEVEN_P90_OVER_P50 = 3.0


def hours(seconds: float) -> float:
    return round(seconds / 3600.0, 3)


@dataclass(frozen=True)
class Interval:
    """The total time as a range: every steady update at the low, then at the high step time.

    The step range is `analysis/step_time.step_range` of the steady row for the run's updates
    (the 95 % interval of the run's mean step time, widened by the contention the timed loop
    measured) when the row recorded one;
    in records made before, the p10 and p90 of single steps.
    """

    low_h: float
    high_h: float
    step_p10_s: float
    step_p90_s: float
    steady_updates: int
    # The same range in seconds (the hours above are rounded to 3.6 s; a short run needs these).
    low_s: float | None = None
    high_s: float | None = None
    # The per-update range used, when it is the interval of the mean (absent: p10–p90).
    step_low_s: float | None = None
    step_high_s: float | None = None
    step_mean_s: float | None = None
    step_precision: float | None = None
    step_caveat: str | None = None


@dataclass(frozen=True)
class PlannedRun:
    """One configuration's full run, from its measured durations; placed in the package."""

    id: str
    updates: int
    epochs: float
    effective_batch: int
    basis: str
    step_time_s: float
    startup_s: float
    evaluations: int
    validation_size: int
    eval_batches: int
    checkpoints: int
    train_s: float
    eval_s: float
    save_s: float
    export_s: float
    margin_s: float
    total_s: float
    total_h: float
    position: int = 0
    start_h: float = 0.0
    end_h: float = 0.0
    interval: Interval | None = None
    # The whole rental (R27); absent from plans written before it was planned.
    save_each_s: float | None = None
    eval_examples_per_s: float | None = None
    restarts: int = 0
    restart: Restart | None = None
    restarts_s: float = 0.0
    # Under a provider's job-length limit or preemption: the jobs, the save interval, the restarts.
    jobs: JobPlan | None = None


@dataclass(frozen=True)
class NotPlanned:
    """A priority configuration left out of the package, and why (`cause`)."""

    id: str
    # not_measured | rejected | no_time
    cause: str
    reason: str
    total_h: float | None = None


@dataclass(frozen=True)
class Projection:
    """`project`'s answer: the run, or the problem that keeps it from being projected."""

    id: str
    run: PlannedRun | None = None
    problem: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PackagePlan:
    """R19: what fits in which package, in priority order, and what the figures assume."""

    days: int
    blocked: bool
    fits_all: bool
    summary: str
    capacity_h: float
    need_h: float
    planned_h: float
    safety_margin: float
    gpus_assumed: int
    order: tuple[PlannedRun, ...]
    not_fit: tuple[NotPlanned, ...]
    assumptions: tuple[str, ...]
    # The whole rental (R27): disk, saves against the collective timeout, throughput.
    disk: Disk | None = None
    save_timeout: SaveTimeout | None = None
    throughput: tuple[Throughput, ...] = ()


def full_run_updates(
    spec: CampaignSpec,
    train: int,
    effective_batch: int,
    microbatch: int,
    accumulation: int,
    replicas: int,
) -> tuple[int, float, str]:
    """(updates, epochs, basis) of the real run on the full dataset for one configuration."""
    plan, batch = spec.plan, spec.batch
    if plan.dataset_size:
        acc = account(
            microbatch=microbatch,
            accumulation=accumulation,
            replicas=replicas,
            dataset_size=plan.dataset_size,
            hold="epochs",
            epochs=plan.epochs,
            drop_last=batch.drop_last,
        )
        basis = (
            f"{plan.epochs} epoch(s) of plan.dataset_size {plan.dataset_size} / {effective_batch} per update"
        )
        return acc.updates, float(plan.epochs), basis
    acc = account(
        microbatch=microbatch,
        accumulation=accumulation,
        replicas=replicas,
        dataset_size=train,
        hold=batch.hold,
        updates=batch.updates,
        epochs=batch.epochs,
        drop_last=batch.drop_last,
    )
    basis = (
        f"the declared hold: {acc.note} (plan.dataset_size not set: the pilot's {train} training examples)"
    )
    return acc.updates, float(acc.epochs), basis


def duration(row: PhaseRow | None, default: float = 0.0) -> float:
    return default if row is None or row.duration_s is None else row.duration_s


def interval(
    run: PlannedRun,
    steady: PhaseRow | None,
    speeds: Sequence[float] = (),
    control: PhaseRow | None = None,
) -> Interval | None:
    """The total time as a range: every steady update at the low, then at the high step time.

    Startup, evaluation, saves and export are kept as measured; the safety margin scales with the
    work. None when the steady phase recorded neither an interval nor a spread.
    """
    if steady is None or run.updates < 1:
        return None
    p10, p90 = steady.detail("step_time_p10_s"), steady.detail("step_time_p90_s")
    # A variant timed to its precision only: the control's stretches tell how a run this long drifts.
    borrowed = (
        run_spread(control.details, run.updates - 1)
        if control is not None and control is not steady
        else None
    )
    span = step_range(steady.details, run.updates - 1, speeds, borrowed)  # the run's updates after its first
    if span is None and (p10 <= 0 or p90 <= 0):
        return None
    lo, hi = (span.low_s, span.high_s) if span is not None else (p10, p90)
    fixed = run.startup_s + run.eval_s + run.save_s + run.restarts_s + run.export_s
    margin = run.margin_s / max(run.total_s - run.margin_s, 1e-9)

    def total(step_s: float) -> float:
        return (fixed + (run.updates - 1) * step_s) * (1 + margin)

    low, high = total(lo), total(hi)
    base = Interval(
        hours(low), hours(high), p10, p90, int(steady.detail("updates")), round(low, 3), round(high, 3)
    )
    if span is None:
        return base
    return dataclasses.replace(
        base,
        step_low_s=span.low_s,
        step_high_s=span.high_s,
        step_mean_s=span.mean_s,
        step_precision=round(span.precision, 5),
        step_caveat=span.caveat,
    )


def project(entry: Configuration, facts: Facts) -> Projection:
    """One configuration's full run projected from its measured durations, or what prevents it.

    train = load + first update + (updates − 1) × steady mean step time: the first update (it
    allocates optimizer state) and the load are measured apart, the steady mean covers the rest.
    eval = evaluations × ⌈validation size / eval batch⌉ × eval_longest's synchronised forward
    (`details.forward_s`, else the phase duration): timed on the *longest* sequences, so it is an
    upper bound per batch.
    """
    config, rows, spec = entry.id, facts.rows, facts.spec
    plan = spec.plan
    steady = rows.get(step_key("steady", config))
    step_s = steady.detail("step_time_s", -1.0) if steady is not None else -1.0
    if steady is None or step_s <= 0:
        return Projection(
            config, problem=f"no measured steady step time ({step_key('steady', config)} did not run)"
        )
    eff, mb, accum, replicas = (
        entry.effective_batch,
        entry.microbatch,
        entry.accumulation,
        entry.replicas or 1,
    )
    if min(eff, mb, accum) < 1:
        return Projection(config, problem=f"{step_key('steady', config)} has no batch params")
    updates, epochs, basis = full_run_updates(spec, facts.train_examples, eff, mb, accum, replicas)
    if updates < 1:
        return Projection(config, problem=f"the dataset makes no complete update of {eff} examples")
    if not math.isfinite(epochs):
        # drop_last with fewer training examples than one update: the declared updates cannot be served.
        return Projection(
            config,
            problem=f"the pilot's training split makes no complete update of {eff} examples "
            "(batch.drop_last): set plan.dataset_size",
        )
    load_s = duration(facts.row("load"))
    first = rows.get(step_key("first_step", config))
    # The timed update alone when the row has it; the whole phase (its objective checks run two
    # more forwards) in records made before it did, and for a captured trainer's first step.
    first_s = max(0.0, first.detail("update_s", duration(first))) if first is not None else step_s
    train_s = load_s + first_s + (updates - 1) * step_s
    notes = []
    p50, p90 = steady.detail("step_time_p50_s"), steady.detail("step_time_p90_s")
    if p50 > 0 and p90 / p50 > UNEVEN_P90_OVER_P50:
        notes.append(
            f"{step_key('steady', config)} step times were uneven (p50 {p50:.4g} s, p90 {p90:.4g} s): "
            "the estimate uses the mean; re-run the pilot on an idle machine"
        )
    n_steady = int(steady.detail("updates"))
    if 0 < n_steady < 10:
        notes.append(
            f"{step_key('steady', config)} timed only {n_steady} updates: raise phases.steady_updates"
        )
    ev = rows.get(step_key("eval_longest", config))
    eval_s, evaluations, val_size, eval_batches = 0.0, 0, 0, 0
    eval_rate: float | None = None
    if ev is not None:
        ev_batch = int(ev.param("eval_microbatch")) or mb
        if plan.validation_size:
            val_size = plan.validation_size
        elif plan.dataset_size:
            val_size = round(plan.dataset_size * spec.split.validation / spec.split.train)
        else:
            val_size = facts.validation_examples
        val_size = plan.eval_examples or val_size
        if plan.eval_every:
            evaluations = max(1, updates // plan.eval_every)  # at least the final one
        else:
            evaluations = plan.evaluations or max(1, math.ceil(epochs))
        eval_batches = math.ceil(val_size / max(ev_batch, 1))
        # The synchronised forward of the longest batch when recorded; the whole phase (which
        # also scans the validation lengths) in records made before it was.
        per_batch = ev.detail("forward_s", duration(ev))
        eval_s = evaluations * eval_batches * per_batch
        examples = int(ev.param("eval_microbatch")) or ev_batch
        eval_rate = examples / per_batch if per_batch > 0 else None
    else:
        notes.append(f"{step_key('eval_longest', config)} not measured: no evaluation reserve")
    save, export = facts.row("save"), facts.row("export")
    if plan.save_every:
        checkpoints = max(1, updates // plan.save_every)  # at least the final one
    else:
        checkpoints = plan.checkpoints or max(1, math.ceil(epochs))
    # The timed write alone when the row has it; the whole phase (with its reload and
    # comparison, an upper bound) in records made before it did.
    save_each = save.detail("save_s", duration(save)) if save is not None else 0.0
    save_s = checkpoints * save_each
    export_s = duration(export)
    for name, row in (("save", save), ("export", export)):
        if row is None:
            notes.append(f"{name} not measured: no {name} reserve")
    again = restart(facts, updates, epochs, eff // replicas, step_s, checkpoints)
    restarts = plan.restarts
    restarts_s = restarts * again.total_s if again is not None else 0.0
    if again is None and restarts:
        notes.append("resume not measured (or failed): no restart reserve")
    work_s = train_s + eval_s + save_s + restarts_s + export_s
    again_s = (again.process_s + (again.skip_s or 0.0)) if again is not None else None
    jobs = job_plan(
        work_s, step_s, save_each if save is not None else None, again_s, plan.max_job_hours, plan.preemptible
    )
    if jobs is not None:
        if again is None:
            notes.append("resume not measured: each job's restart is not counted")
        work_s += jobs.extra_s  # every planned job end is a restart the run pays
    margin_s = work_s * plan.safety_margin
    run = PlannedRun(
        id=config,
        updates=updates,
        epochs=round(epochs, 4),
        effective_batch=eff,
        basis=basis,
        step_time_s=step_s,
        startup_s=round(load_s + first_s, 4),
        evaluations=evaluations,
        validation_size=val_size,
        eval_batches=eval_batches,
        checkpoints=checkpoints,
        train_s=round(train_s, 3),
        eval_s=round(eval_s, 3),
        save_s=round(save_s, 3),
        export_s=round(export_s, 3),
        margin_s=round(margin_s, 3),
        total_s=round(work_s + margin_s, 3),
        total_h=hours(work_s + margin_s),
        save_each_s=round(save_each, 4) if save is not None else None,
        eval_examples_per_s=round(eval_rate, 3) if eval_rate is not None else None,
        restarts=restarts,
        restart=again,
        restarts_s=round(restarts_s, 3),
        jobs=jobs,
    )
    return Projection(config, run=run, notes=tuple(notes))


def package_plan(
    facts: Facts, sheet: ChoiceSheet, assumptions: list[str], record_dir: Path | None = None
) -> PackagePlan:
    """R19: the priority configurations, projected and fitted into the smallest 3/7/30-day package.

    `assumptions` are the campaign-wide ones (caveats.assumptions); each projection's notes follow.
    """
    plan = facts.spec.plan
    wanted = list(plan.priority) or ([sheet.kept] if sheet.kept else ["control"])
    candidates: list[PlannedRun] = []
    not_fit: list[NotPlanned] = []
    notes = list(assumptions)
    for config in wanted:
        entry = sheet.configuration(config)
        if entry is None:
            not_fit.append(NotPlanned(config, "not_measured", "not a configuration measured in this record"))
            continue
        est = project(entry, facts)
        if est.run is None:
            not_fit.append(NotPlanned(config, "not_measured", est.problem))
        elif not entry.passes:
            not_fit.append(NotPlanned(config, "rejected", entry.reason, est.run.total_h))
        else:
            candidates.append(est.run)
            notes += [n for n in est.notes if n not in notes]
    need_s = sum(e.total_s for e in candidates)
    days = next((d for d in PACKAGES if candidates and need_s <= d * DAY_S), 0)
    if days:
        fitting = candidates
    else:
        # Even 30 days cannot hold all of it: keep the priority order, run what fits, list the rest.
        fitting = []
        left = PACKAGES[-1] * DAY_S
        for est_run in candidates:
            if est_run.total_s <= left:
                fitting.append(est_run)
                left -= est_run.total_s
            else:
                not_fit.append(
                    NotPlanned(
                        est_run.id,
                        "no_time",
                        f"needs {est_run.total_h:.1f} h; only {left / 3600:.1f} h left of the "
                        f"{PACKAGES[-1]}-day package after the configurations before it",
                        est_run.total_h,
                    )
                )
    order: list[PlannedRun] = []
    start = 0.0
    # The machine's speeds over the whole pilot (on a CPU host the range spans them).
    speeds = pilot_speeds([row.details for row in facts.rows.values()])
    for position, run in enumerate(fitting, start=1):
        placed = dataclasses.replace(
            run, position=position, start_h=hours(start), end_h=hours(start + run.total_s)
        )
        order.append(
            dataclasses.replace(
                placed,
                interval=interval(
                    placed,
                    facts.rows.get(step_key("steady", run.id)),
                    speeds,
                    facts.rows.get(step_key("steady", "control")),
                ),
            )
        )
        start += run.total_s
    capacity = (days or PACKAGES[-1]) * DAY_S
    if not candidates:
        summary = "nothing to plan: no priority configuration passed its gates with a measured step time"
    elif days:
        summary = (
            f"{days}-day package: {', '.join(e.id for e in order)} in {hours(need_s):.1f} h "
            f"of {capacity / 3600:.0f} h ({need_s / capacity:.0%})"
        )
    else:
        summary = (
            f"does not fit in {PACKAGES[-1]} days: the priority work needs {hours(need_s):.1f} h of "
            f"{capacity / 3600:.0f} h; not fitting: {', '.join(n.id for n in not_fit)}"
        )
    space = disk(facts, max((r.checkpoints for r in order), default=0), record_dir)
    blocked = list(sheet.blocked_by)
    if space is not None and space.status == FAIL:
        blocked.append(f"disk: {space.reason} in {space.checkpoint_dir}")
    if blocked:
        # The figures stay (they are measured), but nobody should rent on them as they are.
        summary = f"BLOCKED — {'; '.join(blocked)}; fix it before renting (times for information: {summary})"
    save_each = next((r.save_each_s for r in order if r.save_each_s is not None), None)
    ranks = max(sheet.replicas, 1)
    return PackagePlan(
        days=days,
        blocked=bool(blocked),
        fits_all=bool(days) and not not_fit and not blocked,
        summary=summary,
        capacity_h=hours(capacity) if candidates else 0.0,
        need_h=hours(need_s),
        planned_h=hours(start),
        safety_margin=plan.safety_margin,
        gpus_assumed=sheet.replicas or 1,
        order=tuple(order),
        not_fit=tuple(not_fit),
        assumptions=tuple(notes),
        disk=space,
        save_timeout=save_timeout(facts, save_each, ranks) if save_each is not None else None,
        throughput=tuple(
            t for c in sheet.configurations if (t := throughput(facts, c.id, c.precision)) is not None
        ),
    )
