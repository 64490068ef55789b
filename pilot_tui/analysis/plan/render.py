"""The plan as text: what `pilot-tui plan` prints, the headless summary, and the Plan pane's lines."""

from __future__ import annotations

from ..memory_estimate import plan_view_lines
from .build import Plan
from .jobs import job_line
from .package import PlannedRun, hours
from .rental import part_bar


def seconds(s: float) -> str:
    """A duration a person reads at a glance: seconds, minutes or hours."""
    if s < 100:
        return f"{s:.3g} s"
    if s < 6000:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_lines(plan: Plan) -> list[str]:
    """Two or three lines for the end of a headless run."""
    s, p = plan.sheet, plan.package
    if s.kept:
        kept = (
            f"plan: kept {s.kept} · {s.precision} · {s.microbatch} × "
            f"{s.accumulation} × {s.replicas} · {s.memory_per_gpu_mb:.0f} MiB per GPU "
            f"({s.memory_basis}, +{s.headroom:.0%}) · stack {s.stack_status}"
        )
    else:
        kept = f"plan: {s.kept_reason}"
    lines = [kept, f"plan: {p.summary}"]
    lines += [f"plan: not planned {n.id} ({n.cause}): {_short(n.reason)}" for n in p.not_fit]
    return lines


def _run_line(o: PlannedRun) -> str:
    return (
        f"  {o.position}. {o.id:<14} {o.start_h:8.2f} h -> {o.end_h:8.2f} h  "
        f"{o.updates} updates × {o.step_time_s:.4g} s (+ startup {o.startup_s:.3g} s) = "
        f"train {hours(o.train_s):.2f} h, eval {hours(o.eval_s):.2f} h "
        f"({o.evaluations} × {o.eval_batches} batches), save {hours(o.save_s):.2f} h, "
        f"export {hours(o.export_s):.3f} h, margin {hours(o.margin_s):.2f} h"
    )


def _range_line(o: PlannedRun) -> str | None:
    span = o.interval
    if span is None:
        return None
    if span.step_low_s is not None and span.step_high_s is not None:
        # The interval of the mean step time, widened by the measured contention (step_time.py);
        # what widened it is a footnote (`range_notes`): the figures come first.
        return (
            f"     {o.id}: {o.end_h - o.start_h:.2f} h, range {span.low_h:.2f}–{span.high_h:.2f} h "
            f"(steady {span.step_low_s:.4g}–{span.step_high_s:.4g} s per update)"
            + ("¹" if span.step_caveat else "")
        )
    return (
        f"     {o.id}: {o.end_h - o.start_h:.2f} h, range {span.low_h:.2f}–{span.high_h:.2f} h "
        f"(steady p10 {span.step_p10_s:.4g} s – p90 {span.step_p90_s:.4g} s over "
        f"{span.steady_updates} timed updates)"
    )


def range_notes(order: tuple[PlannedRun, ...]) -> list[str]:
    """The footnote of the range lines: how each configuration's range was made."""
    notes = [(o.id, o.interval.step_caveat) for o in order if o.interval and o.interval.step_caveat]
    if not notes:
        return []
    seen: set[str] = set()
    lines = ["  ¹ range: the 95 % interval of the steady mean step over the run's updates (docs/plan.md)"]
    for config, caveat in notes:
        clauses = []
        for clause in caveat.split("; "):
            # An explanation already given for a configuration above is not repeated, only its figure.
            head, paren, tail = clause.partition(" (")
            clauses.append(head if paren and tail in seen else clause)
            if paren:
                seen.add(tail)
        lines.append(f"    {config}: {'; '.join(clauses)}")
    return lines


PARTS = (("S", "steps"), ("E", "evals"), ("C", "saves"), ("R", "restarts"), ("X", "export"), ("m", "margin"))


def _parts_line(o: PlannedRun) -> str | None:
    """Where one configuration's time goes, as parts of a bar (absent from plans made before it)."""
    if o.save_each_s is None and not o.restarts:
        return None
    values = [o.train_s, o.eval_s, o.save_s, o.restarts_s, o.export_s, o.margin_s]
    total = sum(values) or 1.0
    named = " · ".join(
        f"{name} {hours(v):.2f} h ({v / total:.0%})" for (_, name), v in zip(PARTS, values, strict=True)
    )
    bar = part_bar([(letter, v) for (letter, _), v in zip(PARTS, values, strict=True)])
    return f"     {o.id}: [{bar}] {named}"


def _restart_line(o: PlannedRun) -> str | None:
    r = o.restart
    if r is None:
        return None
    skip = (
        f"data skip to mid-package {seconds(r.skip_s)} ({r.skip_examples} examples re-read)"
        if r.skip_s is not None
        else "data skip not measured (the resume row did not time one)"
    )
    return (
        f"     {o.id}: {o.restarts} restart(s) × {seconds(r.total_s)} = fresh process to first update "
        f"{seconds(r.process_s)} + {skip} "
        f"+ half a save interval redone {seconds(r.redo_s)}; saves {o.checkpoints} × {seconds(o.save_each_s or 0)}"
        + (
            f"; evaluation {o.evaluations} × {o.validation_size} examples at {o.eval_examples_per_s:.4g} examples/s"
            if o.eval_examples_per_s
            else ""
        )
    )


def rental_lines(plan: Plan) -> list[str]:
    """The whole rental: disk, saves against the collective timeout, throughput per configuration."""
    p = plan.package
    if p.disk is None and p.save_timeout is None and not p.throughput:
        return []
    lines = ["", "Rental"]
    d = p.disk
    if d is not None:
        lines.append(
            f"  disk                {d.status}: checkpoint {d.checkpoint_mb:.4g} MiB × {d.copies} = "
            f"{d.need_gb:.3g} GiB of {d.free_gb:.4g} GiB free in {d.checkpoint_dir} ({d.reason})"
        )
    t = p.save_timeout
    lines.append(
        f"  save vs timeout     {t.status}: {t.reason}"
        if t is not None
        else "  save vs timeout     one process: no collective waits on a save"
    )
    for tp in p.throughput:
        tokens = (
            f"{tp.tokens_per_s:,.0f} tokens/s (non-padding)"
            if tp.tokens_per_s is not None
            else "no token count"
        )
        examples = (
            f"{tp.examples_per_s:,.1f} examples/s" if tp.examples_per_s is not None else "no example count"
        )
        mfu = f" · MFU {tp.mfu:.1%} ({tp.mfu_basis})" if tp.mfu is not None else ""
        lines.append(f"  throughput          {tp.id:<14} {tokens} · {examples}{mfu}")
    return lines


def plan_lines(plan: Plan) -> list[str]:
    """The full sheet and package as text, each planned configuration with its time range."""
    s, p = plan.sheet, plan.package
    lines = [
        "Choice sheet",
        f"  kept                {s.kept or '(none)'}",
        f"  why                 {s.kept_reason}",
        f"  stack               {s.stack_status}: {s.stack_reason}",
        f"  device              {s.device} · torch {s.torch} · CUDA {s.cuda or '-'}"
        + (f" · {', '.join(s.gpu_names)}" if s.gpu_names else ""),
        f"  memory per GPU      {s.memory_per_gpu_mb:.0f} MiB = {s.memory_basis} {s.peak_mb:.0f} MiB "
        f"+ {s.headroom:.0%} headroom" + (f" ({s.shown_for})" if s.shown_for is not None else ""),
        f"  largest that passed microbatch {s.max_microbatch_passed}, max length {s.max_length_passed} "
        f"(from {s.max_dims_source})",
        f"  precision           {s.precision}",
        f"  batch               microbatch {s.microbatch} × accumulation {s.accumulation} × "
        f"replicas {s.replicas} = {s.effective_batch}",
        f"  distribution        {s.distribution} · {s.gpus} GPU(s) planned",
        f"  expected result     {s.expected_result or '(not declared)'}",
    ]
    if s.memory_note is not None:
        lines.append(f"  note                {s.memory_note}")
    lines.append("  configurations")
    for c in s.configurations:
        step = f"{c.step_time_s:.4g} s/update" if c.step_time_s is not None else "no step time"
        q = " · changes the question" if c.changes_question else ""
        lines.append(
            f"    {c.status:<8} {c.id:<14} {c.precision or '-':<5} mb {c.microbatch} × "
            f"{c.accumulation} · {c.memory_per_gpu_mb:.0f} MiB · {step}{q} · {c.reason}"
        )
    lines += ["", "Package plan", f"  {p.summary}"]
    for o in p.order:
        lines.append(_run_line(o))
        jobs = job_line(o.id, o.jobs) if o.jobs is not None else None
        for extra in (_range_line(o), _parts_line(o), _restart_line(o), jobs):
            if extra is not None:
                lines.append(extra)
    if p.order:
        lines.append(f"     updates: {p.order[0].basis}")
    for n in p.not_fit:
        lines.append(f"  not planned: {n.id} ({n.cause}): {n.reason}")
    for a in p.assumptions:
        lines.append(f"  assumes: {a}")
    lines += range_notes(p.order)
    return lines + rental_lines(plan) + plan_view_lines(plan.estimate)


def text_lines(plan: Plan) -> list[str]:
    """What `pilot-tui plan` prints: caveats first, then the sheet and the package."""
    lines = [f"! {c}" for c in plan.caveats]
    if lines:
        lines.append("")
    return lines + plan_lines(plan)
