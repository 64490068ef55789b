"""From pilot to rental: the choice sheet and the 3/7/30-day package plan (R18, R19). Pure, no torch.

Everything here is computed from a record's data dict — the measured rows, the stack check, the
accounting — so a saved record can be re-planned at any time and the TUI, the headless CLI and
`pilot-tui plan` all show the same figures. Nothing is assumed that was not measured: a speed-up
from more GPUs, a faster step on another device, a cheaper evaluation.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import tomli_w

from ..core import phase_table
from ..core.accounting import account
from ..core.record import Record, RecordError
from ..core.rows import BASIS_CPU, BASIS_CUDA, PhaseRow, StepKey, newest_by_key, num, number, read_rows
from ..core.spec import CampaignSpec, SpecError, parse_spec
from ..core.steps import campaign_steps
from ..core.text import one_line
from .memory_estimate import plan_view, plan_view_lines

DAY_S = 86_400.0
PACKAGES = (3, 7, 30)
# A steady phase whose slow updates are this many times its median is flagged as uneven.
UNEVEN_P90_OVER_P50 = 3.0


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 3)


def spec_of(data: Mapping[str, Any]) -> CampaignSpec:
    """The campaign spec the record ran under (its own copy of the file, validated again)."""
    campaign = data.get("campaign") or {}
    text = campaign.get("spec_text")
    if not isinstance(text, str) or not text.strip():
        raw = campaign.get("spec")
        if not isinstance(raw, dict):
            raise SpecError("the record holds no campaign spec (campaign.spec_text)")
        text = tomli_w.dumps(raw)
    path = Path(str(campaign.get("spec_path") or "campaign.toml"))
    return parse_spec(text, path).spec


Rows = Mapping[str, PhaseRow]


def newest_rows(data: Mapping[str, Any]) -> dict[str, PhaseRow]:
    """By step key, the newest row of each step: a retry is a new row, the newest is the measurement."""
    return newest_by_key(read_rows(data.get("phases")))


def _key(phase: str, config: str) -> str:
    return StepKey(phase, config).key


def configurations(data: Mapping[str, Any], spec: CampaignSpec) -> list[str]:
    """control, the declared variants, then any variant made on the fly that has rows."""
    ids = ["control", *(v.id for v in spec.variants)]
    for row in read_rows(data.get("phases")):
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
    return [row for p in phases if (row := rows.get(_key(p, config))) is not None]


def stack_gate(rows: Rows) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, details) of the stack check; `missing` when the phase did not run."""
    row = rows.get("stack")
    if row is None:
        return "missing", "the stack phase did not run: nothing can be kept unchecked", {}
    return row.verdict, row.reason, dict(row.details)


def blockers(rows: Rows) -> tuple[list[str], list[str]]:
    """(failed, not run) among the phases a multi-day run cannot do without (save, export,
    resume, final): a failure blocks the plan, a phase not run qualifies it."""
    failed, missing = [], []
    for phase in phase_table.plan_blockers():
        row = rows.get(phase)
        if row is None:
            missing.append(phase)
        elif not row.ok:
            failed.append(f"{phase} failed: {row.reason}")
    return failed, missing


def _precision_ok(stack_details: Mapping[str, Any], precision: str) -> tuple[bool, str]:
    for item in stack_details.get("precisions") or []:
        if item.get("precision") == precision:
            return bool(item.get("ok")), str(item.get("error", ""))
    if precision == "bf16" and "bf16" in stack_details:
        return (True, "") if stack_details["bf16"] else (False, "bf16 is not supported on this device")
    if precision == "fp32" or not stack_details.get("precisions"):
        return True, ""
    # e.g. a variant made in the TUI after the stack phase ran: nothing is kept unchecked (R18).
    return False, "the stack phase did not check it"


def assess(
    config: str,
    rows: Rows,
    stack: tuple[str, str, dict[str, Any]],
    headroom: float,
    variants_section: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """One configuration's gates: the stack (its precision included) and every memory phase."""
    gates = phase_table.gates_for(config)
    own = {p: rows[_key(p, config)] for p in gates if _key(p, config) in rows}
    params: Mapping[str, Any] = next(iter(own.values())).params if own else {}
    if "steady" in own:
        params = own["steady"].params or params
    problems: list[str] = []
    status, reason, details = stack
    if status == "missing":
        problems.append("stack not checked (the stack phase did not run)")
    elif status == "fail":
        problems.append(f"stack check failed: {reason}")
    precision = str(params.get("precision", ""))
    if precision and status != "missing":
        ok, why = _precision_ok(details, precision)
        if not ok:
            problems.append(f"precision {precision} not supported: {why}")
    for p in gates:
        row = own.get(p)
        if row is None:
            problems.append(f"{_key(p, config)} not measured")
        elif not row.ok:
            problems.append(f"{_key(p, config)} failed: {row.reason}")
    peak = max((row.memory.peak() or 0.0 for row in own_rows(config, rows)), default=0.0)
    entry: dict[str, Any] = {
        "id": config,
        "passes": not problems,
        "reason": "; ".join(problems) if problems else "stack and memory gates passed",
        "precision": precision,
        "microbatch": int(num(params.get("microbatch"))),
        "accumulation": int(num(params.get("accumulation"))),
        "replicas": int(num(params.get("replicas"), 1)),
        "effective_batch": int(num(params.get("effective_batch"))),
        "max_length": int(num(params.get("max_length"))),
        "peak_mb": round(peak, 1),
        "memory_per_gpu_mb": round(peak * (1 + headroom), 1),
    }
    if "steady" in own and number(own["steady"].details.get("step_time_s")) is not None:
        entry["step_time_s"] = own["steady"].detail("step_time_s")
    question = variants_section.get(config) or {}
    if "changes_question" in question:
        entry["changes_question"] = bool(question["changes_question"])
        if question["changes_question"]:
            entry["question_note"] = str(question.get("question_note", ""))
    return entry


def largest_passed(rows: Rows, fit: Mapping[str, Any]) -> dict[str, Any]:
    """The largest microbatch and max length seen passing, from rows and from the `[fit]` search.

    A configuration counts only when every one of its memory gates ran and passed: a first step
    that passed before its eval on the longest sequences ran out of memory did not pass.
    """
    mbs, lengths = [], []
    # Only the memory gates: other phases (overfit, fit_search, lr_run) carry their own sizes.
    configs = {r.variant for r in rows.values() if r.name in phase_table.control_gates()}
    for config in configs:
        gates = [rows.get(_key(p, config)) for p in phase_table.gates_for(config)]
        if any(row is None or not row.ok for row in gates):
            continue
        for row in gates:
            assert row is not None
            if "microbatch" in row.params:
                mbs.append(int(row.param("microbatch")))
            if "max_length" in row.params:
                lengths.append(int(row.param("max_length")))
    sources = ["passing rows"] if mbs else []
    if fit.get("found"):
        sources.append("[fit] search")
        if "largest_microbatch" in fit:
            mbs.append(int(num(fit["largest_microbatch"])))
        if "max_length" in fit:
            lengths.append(int(num(fit["max_length"])))
    return {
        "max_microbatch_passed": max(mbs, default=0),
        "max_length_passed": max(lengths, default=0),
        "max_dims_source": " + ".join(sources) if sources else "nothing passed",
    }


def choice_sheet(data: Mapping[str, Any], spec: CampaignSpec | None = None) -> dict[str, Any]:
    """R18: memory per GPU, largest dimensions that passed, the configuration kept and why."""
    spec = spec or spec_of(data)
    rows = newest_rows(data)
    stack = stack_gate(rows)
    plan = spec.plan
    variants_section = {str(v.get("id")): v for v in data.get("variants") or [] if isinstance(v, dict)}
    assessed = [assess(c, rows, stack, plan.headroom, variants_section) for c in configurations(data, spec)]
    by_id = {a["id"]: a for a in assessed}
    order = [p for p in plan.priority if p in by_id] + [
        a["id"] for a in assessed if a["id"] not in plan.priority
    ]
    failed, not_run = blockers(rows)
    skipped = set(spec.phases.skip)
    candidate = next((by_id[c] for c in order if by_id[c]["passes"]), None)
    # A campaign that cannot save, export, resume or reload is not a plan for days of rental.
    kept = candidate if not failed else None
    for a in assessed:
        a["status"] = "kept" if kept is not None and a is kept else ("passes" if a["passes"] else "rejected")
    basis = memory_basis(rows)
    shown = kept or candidate or by_id["control"]
    if kept is not None:
        first = order.index(kept["id"]) == 0
        why = "first in priority order" if first else "first in priority order that passed"
        before = [f"{c}: {by_id[c]['reason']}" for c in order[: order.index(kept["id"])]]
        kept_reason = (
            f"{why}; stack {stack[0]}, every memory gate passed, needs "
            f"{kept['memory_per_gpu_mb']:.0f} MiB per GPU ({basis}, +{plan.headroom:.0%} headroom)"
        )
        if kept.get("changes_question"):
            # R12: kept because it came first in priority, but it is not the control's experiment.
            kept_reason += f"; it changes the question: {kept.get('question_note', '')}"
        if before:
            kept_reason += "; before it: " + "; ".join(before)
    elif failed:
        would = f" ({candidate['id']} passes its memory gates)" if candidate else ""
        kept_reason = (
            "no configuration kept: the campaign cannot run for days as it is — " + "; ".join(failed) + would
        )
    else:
        kept_reason = "no configuration kept: " + "; ".join(f"{a['id']}: {a['reason']}" for a in assessed)
    env = data.get("environment") or {}
    stack_details = stack[2]
    gpus = stack_details.get("gpus") or env.get("devices") or []
    sheet: dict[str, Any] = {
        "kept": kept["id"] if kept else "",
        "kept_reason": kept_reason,
        "blocked_by": failed,
        "untested": [p for p in not_run if p not in skipped],
        "skipped_checks": [p for p in not_run if p in skipped],
        "memory_basis": basis,
        "peak_mb": shown["peak_mb"],
        "headroom": plan.headroom,
        "memory_per_gpu_mb": shown["memory_per_gpu_mb"],
        **largest_passed(rows, data.get("fit") or {}),
        "precision": shown["precision"] or spec.batch.precision,
        "microbatch": shown["microbatch"] or spec.batch.microbatch,
        "accumulation": shown["accumulation"] or spec.batch.accumulation,
        "replicas": shown["replicas"],
        # Unmeasured (control not kept, no rows): the declared product, like the batch figures above.
        "effective_batch": shown["effective_batch"]
        or spec.batch.microbatch * spec.batch.accumulation * spec.batch.replicas,
        "max_length": shown["max_length"],
        "distribution": plan.distribution,
        "gpus": plan.gpus,
        "expected_result": plan.expected_result,
        "stack_status": stack[0],
        "stack_reason": stack[1],
        "device": str(env.get("device", stack_details.get("device", ""))),
        "torch": str(stack_details.get("torch", env.get("torch", ""))),
        "cuda": str(stack_details.get("cuda", env.get("cuda", ""))),
        "gpu_names": [str(g.get("name", "")) for g in gpus if isinstance(g, dict)],
        "configurations": assessed,
    }
    if kept is None:
        sheet["shown_for"] = f"{shown['id']} (not kept)"
    if gpus and kept is not None:
        smallest = min(num(g.get("memory_mb")) for g in gpus if isinstance(g, dict))
        if smallest and kept["memory_per_gpu_mb"] > smallest:
            sheet["memory_note"] = (
                f"with headroom it needs {kept['memory_per_gpu_mb']:.0f} MiB, more than this GPU's "
                f"{smallest:.0f} MiB: rent a larger one or lower the headroom knowingly"
            )
    return sheet


# ---------------------------------------------------------------------------------- package plan


def full_run_updates(
    spec: CampaignSpec,
    data: Mapping[str, Any],
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
    train = int(num(_splits(data).get("train")))
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


def _splits(data: Mapping[str, Any]) -> Mapping[str, Any]:
    dataset = data.get("dataset")
    splits = dataset.get("splits") if isinstance(dataset, Mapping) else None
    return splits if isinstance(splits, Mapping) else {}


def _duration(row: PhaseRow | None, default: float = 0.0) -> float:
    return default if row is None or row.duration_s is None else row.duration_s


def estimate(
    entry: Mapping[str, Any],
    rows: Rows,
    spec: CampaignSpec,
    data: Mapping[str, Any],
) -> dict[str, Any]:
    """One configuration's full run from its measured durations; `problem` set when it cannot be.

    train = load + first update + (updates − 1) × steady mean step time: the first update (it
    allocates optimizer state) and the load are measured apart, the steady mean covers the rest.
    eval = evaluations × ⌈validation size / eval batch⌉ × eval_longest's synchronised forward
    (`details.forward_s`, else the phase duration): timed on the *longest* sequences, so it is an
    upper bound per batch.
    """
    config = str(entry["id"])
    plan = spec.plan
    out: dict[str, Any] = {"id": config}
    steady = rows.get(_key("steady", config))
    step_s = steady.detail("step_time_s", -1.0) if steady is not None else -1.0
    if steady is None or step_s <= 0:
        return out | {"problem": f"no measured steady step time ({_key('steady', config)} did not run)"}
    eff = int(entry.get("effective_batch") or 0)
    mb, accum, replicas = (
        int(entry.get("microbatch") or 0),
        int(entry.get("accumulation") or 0),
        int(entry.get("replicas") or 1),
    )
    if min(eff, mb, accum) < 1:
        return out | {"problem": f"{_key('steady', config)} has no batch params"}
    updates, epochs, basis = full_run_updates(spec, data, eff, mb, accum, replicas)
    if updates < 1:
        return out | {"problem": f"the dataset makes no complete update of {eff} examples"}
    if not math.isfinite(epochs):
        # drop_last with fewer training examples than one update: the declared updates cannot be served.
        return out | {
            "problem": f"the pilot's training split makes no complete update of {eff} examples "
            "(batch.drop_last): set plan.dataset_size"
        }
    load_s = _duration(rows.get("load"))
    first_s = _duration(rows.get(_key("first_step", config)), step_s)
    train_s = load_s + first_s + (updates - 1) * step_s
    notes = []
    p50, p90 = steady.detail("step_time_p50_s"), steady.detail("step_time_p90_s")
    if p50 > 0 and p90 / p50 > UNEVEN_P90_OVER_P50:
        notes.append(
            f"{_key('steady', config)} step times were uneven (p50 {p50:.4g} s, p90 {p90:.4g} s): "
            "the estimate uses the mean; re-run the pilot on an idle machine"
        )
    n_steady = int(steady.detail("updates"))
    if 0 < n_steady < 10:
        notes.append(f"{_key('steady', config)} timed only {n_steady} updates: raise phases.steady_updates")
    ev = rows.get(_key("eval_longest", config))
    eval_s, evaluations, val_size, eval_batches = 0.0, 0, 0, 0
    if ev is not None:
        ev_batch = int(ev.param("eval_microbatch")) or mb
        splits = _splits(data)
        if plan.validation_size:
            val_size = plan.validation_size
        elif plan.dataset_size:
            val_size = round(plan.dataset_size * spec.split.validation / spec.split.train)
        else:
            val_size = int(num(splits.get("validation")))
        evaluations = plan.evaluations or max(1, math.ceil(epochs))
        eval_batches = math.ceil(val_size / max(ev_batch, 1))
        # The synchronised forward of the longest batch when recorded; the whole phase (which
        # also scans the validation lengths) in records made before it was.
        per_batch = ev.detail("forward_s", _duration(ev))
        eval_s = evaluations * eval_batches * per_batch
    else:
        notes.append(f"{_key('eval_longest', config)} not measured: no evaluation reserve")
    save, export = rows.get("save"), rows.get("export")
    checkpoints = plan.checkpoints or max(1, math.ceil(epochs))
    save_s = checkpoints * _duration(save)
    export_s = _duration(export)
    for name, row in (("save", save), ("export", export)):
        if row is None:
            notes.append(f"{name} not measured: no {name} reserve")
    work_s = train_s + eval_s + save_s + export_s
    margin_s = work_s * plan.safety_margin
    return out | {
        "updates": updates,
        "epochs": round(epochs, 4),
        "effective_batch": eff,
        "basis": basis,
        "step_time_s": step_s,
        "startup_s": round(load_s + first_s, 4),
        "evaluations": evaluations,
        "validation_size": val_size,
        "eval_batches": eval_batches,
        "checkpoints": checkpoints,
        "train_s": round(train_s, 3),
        "eval_s": round(eval_s, 3),
        "save_s": round(save_s, 3),
        "export_s": round(export_s, 3),
        "margin_s": round(margin_s, 3),
        "total_s": round(work_s + margin_s, 3),
        "total_h": _hours(work_s + margin_s),
        "notes": notes,
    }


def package_plan(
    data: Mapping[str, Any], sheet: Mapping[str, Any], spec: CampaignSpec | None = None
) -> dict[str, Any]:
    """R19: the priority configurations, estimated and fitted into the smallest 3/7/30-day package."""
    spec = spec or spec_of(data)
    rows = newest_rows(data)
    plan = spec.plan
    by_id = {c["id"]: c for c in sheet["configurations"]}
    wanted = list(plan.priority) or ([sheet["kept"]] if sheet["kept"] else ["control"])
    candidates, not_fit = [], []
    for config in wanted:
        entry = by_id.get(config)
        if entry is None:
            not_fit.append(
                {
                    "id": config,
                    "cause": "not_measured",
                    "reason": "not a configuration measured in this record",
                }
            )
            continue
        est = estimate(entry, rows, spec, data)
        if "problem" in est:
            not_fit.append({"id": config, "cause": "not_measured", "reason": est["problem"]})
        elif not entry["passes"]:
            not_fit.append(
                {"id": config, "cause": "rejected", "reason": entry["reason"], "total_h": est["total_h"]}
            )
        else:
            candidates.append(est)
    assumptions = _assumptions(data, sheet, spec, rows)
    for est in candidates:
        assumptions += [n for n in est.pop("notes") if n not in assumptions]
    need_s = sum(e["total_s"] for e in candidates)
    days = next((d for d in PACKAGES if candidates and need_s <= d * DAY_S), 0)
    order: list[dict[str, Any]] = []
    if days:
        fitting = candidates
    else:
        # Even 30 days cannot hold all of it: keep the priority order, run what fits, list the rest.
        fitting = []
        left = PACKAGES[-1] * DAY_S
        for est in candidates:
            if est["total_s"] <= left:
                fitting.append(est)
                left -= est["total_s"]
            else:
                not_fit.append(
                    {
                        "id": est["id"],
                        "cause": "no_time",
                        "reason": f"needs {est['total_h']:.1f} h; only {left / 3600:.1f} h left of the "
                        f"{PACKAGES[-1]}-day package after the configurations before it",
                        "total_h": est["total_h"],
                    }
                )
    start = 0.0
    for position, est in enumerate(fitting, start=1):
        order.append(
            est | {"position": position, "start_h": _hours(start), "end_h": _hours(start + est["total_s"])}
        )
        start += est["total_s"]
    capacity = (days or PACKAGES[-1]) * DAY_S
    if not candidates:
        summary = "nothing to plan: no priority configuration passed its gates with a measured step time"
    elif days:
        summary = (
            f"{days}-day package: {', '.join(e['id'] for e in order)} in {_hours(need_s):.1f} h "
            f"of {capacity / 3600:.0f} h ({need_s / capacity:.0%})"
        )
    else:
        summary = (
            f"does not fit in {PACKAGES[-1]} days: the priority work needs {_hours(need_s):.1f} h of "
            f"{capacity / 3600:.0f} h; not fitting: {', '.join(n['id'] for n in not_fit)}"
        )
    blocked = list(sheet.get("blocked_by") or [])
    if blocked:
        # The figures stay (they are measured), but nobody should rent on them as they are.
        summary = f"BLOCKED — {'; '.join(blocked)}; fix it before renting (times for information: {summary})"
    return {
        "days": days,
        "blocked": bool(blocked),
        "fits_all": bool(days) and not not_fit and not blocked,
        "summary": summary,
        "capacity_h": _hours(capacity) if candidates else 0.0,
        "need_h": _hours(need_s),
        "planned_h": _hours(start),
        "safety_margin": plan.safety_margin,
        "gpus_assumed": int(sheet.get("replicas") or 1),
        "order": order,
        "not_fit": not_fit,
        "assumptions": assumptions,
    }


def _assumptions(
    data: Mapping[str, Any], sheet: Mapping[str, Any], spec: CampaignSpec, rows: Rows
) -> list[str]:
    out = []
    for phase in sheet.get("untested") or []:
        out.append(f"{phase} did not run: the plan assumes it works — run it before renting for days")
    for phase in sheet.get("skipped_checks") or []:
        out.append(f"{phase} is skipped by the campaign (phases.skip): the plan assumes it works")
    replicas = int(sheet.get("replicas") or 1)
    if spec.plan.gpus > replicas:
        out.append(
            f"plan.gpus = {spec.plan.gpus} but the pilot measured {replicas} replica(s): the estimate is for "
            f"{replicas} GPU(s); no speed-up from more GPUs is assumed until it is measured"
        )
    if replicas > 1:
        # R22: the step time is the slowest rank's, measured on `replicas` ranks with their
        # collectives in it; never one GPU's time divided by the GPU count.
        out.append(
            f"step times were measured on {replicas} ranks under torchrun ({spec.distributed.strategy}), "
            "slowest rank, collectives included: no linear speed-up is assumed"
        )
    device = str((data.get("environment") or {}).get("device", ""))
    if device.startswith("cpu"):
        out.append(
            "step times were measured on the CPU: re-run the pilot on the rented GPU before trusting the days"
        )
    note = tf32_note(data.get("environment") or {}, rows.values())
    if note:
        out.append(note)
    out.append(
        "the full dataset has the pilot's sequence lengths; evaluation is timed on the longest "
        "validation batch, so its reserve is an upper bound"
    )
    return out


def tf32_note(environment: Mapping[str, Any], rows: Iterable[PhaseRow]) -> str | None:
    """A line when fp32 steps were timed on a GPU with TF32 off (the [environment] says so).

    TF32 makes fp32 matmuls several times faster on Ampere and later: a plan timed without it
    is pessimistic for a run that turns it on, and the reader must know which one it is.
    """
    if not str(environment.get("device", "")).startswith("cuda") or environment.get("tf32_matmul", True):
        return None
    timed = sorted(
        r.key for r in rows if r.name in ("first_step", "steady") and r.params.get("precision") == "fp32"
    )
    if not timed:
        return None
    return (
        f"fp32 steps ({', '.join(timed[:3])}{', …' if len(timed) > 3 else ''}) were timed with TF32 off "
        "(torch.backends.cuda.matmul.allow_tf32 = False): a run that enables TF32 is faster than planned"
    )


def compute_plan(data: Mapping[str, Any]) -> dict[str, Any]:
    """The record's `[plan]`: `sheet` (R18) and `package` (R19), from its own rows and spec."""
    spec = spec_of(data)
    sheet = choice_sheet(data, spec)
    return annotate({"sheet": sheet, "package": package_plan(data, sheet, spec)}, data) | estimate_view(data)


def estimate_view(data: Mapping[str, Any]) -> dict[str, Any]:
    """`estimate`: the fake-tensor estimate beside the measurement, and its rental (R23)."""
    view = plan_view(data)
    return {"estimate": view} if view else {}


# ---------------------------------------------------------------------------------- text views


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_lines(plan: Mapping[str, Any]) -> list[str]:
    """Two or three lines for the end of a headless run."""
    sheet, package = plan["sheet"], plan["package"]
    if sheet["kept"]:
        kept = (
            f"plan: kept {sheet['kept']} · {sheet['precision']} · {sheet['microbatch']} × "
            f"{sheet['accumulation']} × {sheet['replicas']} · {sheet['memory_per_gpu_mb']:.0f} MiB per GPU "
            f"({sheet['memory_basis']}, +{sheet['headroom']:.0%}) · stack {sheet['stack_status']}"
        )
    else:
        kept = f"plan: {sheet['kept_reason']}"
    lines = [kept, f"plan: {package['summary']}"]
    lines += [
        f"plan: not planned {n['id']} ({n['cause']}): {_short(n['reason'])}" for n in package["not_fit"]
    ]
    return lines


def plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """The full sheet and package as text (what `pilot-tui plan RECORD` prints)."""
    s, p = plan["sheet"], plan["package"]
    lines = [
        "Choice sheet",
        f"  kept                {s['kept'] or '(none)'}",
        f"  why                 {s['kept_reason']}",
        f"  stack               {s['stack_status']}: {s['stack_reason']}",
        f"  device              {s['device']} · torch {s['torch']} · CUDA {s['cuda'] or '-'}"
        + (f" · {', '.join(s['gpu_names'])}" if s["gpu_names"] else ""),
        f"  memory per GPU      {s['memory_per_gpu_mb']:.0f} MiB = {s['memory_basis']} {s['peak_mb']:.0f} MiB "
        f"+ {s['headroom']:.0%} headroom" + (f" ({s['shown_for']})" if "shown_for" in s else ""),
        f"  largest that passed microbatch {s['max_microbatch_passed']}, max length {s['max_length_passed']} "
        f"(from {s['max_dims_source']})",
        f"  precision           {s['precision']}",
        f"  batch               microbatch {s['microbatch']} × accumulation {s['accumulation']} × "
        f"replicas {s['replicas']} = {s['effective_batch']}",
        f"  distribution        {s['distribution']} · {s['gpus']} GPU(s) planned",
        f"  expected result     {s['expected_result'] or '(not declared)'}",
    ]
    if "memory_note" in s:
        lines.append(f"  note                {s['memory_note']}")
    lines.append("  configurations")
    for c in s["configurations"]:
        step = f"{c['step_time_s']:.4g} s/update" if "step_time_s" in c else "no step time"
        q = " · changes the question" if c.get("changes_question") else ""
        lines.append(
            f"    {c['status']:<8} {c['id']:<14} {c['precision'] or '-':<5} mb {c['microbatch']} × "
            f"{c['accumulation']} · {c['memory_per_gpu_mb']:.0f} MiB · {step}{q} · {c['reason']}"
        )
    lines += ["", "Package plan", f"  {p['summary']}"]
    for o in p["order"]:
        lines.append(
            f"  {o['position']}. {o['id']:<14} {o['start_h']:8.2f} h -> {o['end_h']:8.2f} h  "
            f"{o['updates']} updates × {o['step_time_s']:.4g} s (+ startup {o['startup_s']:.3g} s) = "
            f"train {_hours(o['train_s']):.2f} h, eval {_hours(o['eval_s']):.2f} h "
            f"({o['evaluations']} × {o['eval_batches']} batches), save {_hours(o['save_s']):.2f} h, "
            f"export {_hours(o['export_s']):.3f} h, margin {_hours(o['margin_s']):.2f} h"
        )
    if p["order"]:
        lines.append(f"     updates: {p['order'][0]['basis']}")
    for n in p["not_fit"]:
        lines.append(f"  not planned: {n['id']} ({n['cause']}): {n['reason']}")
    for a in p["assumptions"]:
        lines.append(f"  assumes: {a}")
    return lines + plan_view_lines(plan.get("estimate"))


def print_plan(record_path: str | Path, out: TextIO | None = None) -> int:
    """`pilot-tui plan RECORD`: recompute the plan from the record's rows and print it.

    Read-only: the record's own `[plan]` (written when the campaign finished) is left as it is.
    Exit 0 when a configuration is kept and the priority work fits a package, else 1.
    """
    record = Record.read(record_path)  # RecordError: exit 2
    out = out or sys.stdout  # looked up at call time, so a redirected stdout is honoured
    saved = record.data.get("plan")
    try:
        plan = compute_plan(record.data) if saved is not None else provisional_plan(record.data)
    except (SpecError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise RecordError(f"{record.path}: cannot plan from this record: {exc}") from None
    campaign = record.data.get("campaign") or {}
    # Record text is data: every printed line is escaped and bounded (R24).
    print(one_line(f"pilot-tui plan · campaign {campaign.get('name', '?')} · record {record.path}"), file=out)
    if saved is None:
        print(
            "  (the record holds no [plan]: the campaign did not finish; computed now, not written)", file=out
        )
    print("", file=out)
    for line in text_lines(plan):
        print(one_line(line), file=out)
    out.flush()
    return 0 if plan["sheet"]["kept"] and plan["package"]["fits_all"] else 1


# ---------------------------------------------------------------------------------- what a renter acts on
# Kept apart from the sheet and package above (issue 18): each adds to the plan without changing how
# it is computed, and `annotate` wires them in.

COMMON_GPU_GB = (24, 40, 48, 80, 141)
# Above this 1-minute load average per core the timed loop shared the CPU: its step times are not
# the machine's (identical pilots on a busy 2-core machine predicted 0.8 to 4.0 h).
BUSY_LOAD_PER_CORE = 1.0


def interval(order_entry: Mapping[str, Any], steady_details: Mapping[str, Any]) -> dict[str, Any] | None:
    """The total time as a range: every steady update at the p10, then at the p90 step time.

    Startup, evaluation, saves and export are kept as measured; the safety margin scales with the
    work. None when the steady phase recorded no spread (records made before it did).
    """
    p10, p90 = num(steady_details.get("step_time_p10_s")), num(steady_details.get("step_time_p90_s"))
    updates = int(num(order_entry.get("updates")))
    if p10 <= 0 or p90 <= 0 or updates < 1:
        return None
    fixed = sum(num(order_entry.get(k)) for k in ("startup_s", "eval_s", "save_s", "export_s"))
    margin = num(order_entry.get("margin_s")) / max(
        num(order_entry.get("total_s")) - num(order_entry.get("margin_s")), 1e-9
    )

    def total(step_s: float) -> float:
        return (fixed + (updates - 1) * step_s) * (1 + margin)

    return {
        "low_h": _hours(total(p10)),
        "high_h": _hours(total(p90)),
        "step_p10_s": p10,
        "step_p90_s": p90,
        "steady_updates": int(num(steady_details.get("updates"))),
    }


def busy_machine(steady_details: Mapping[str, Any]) -> str:
    """A caveat when the machine was too busy during the timed loop for its times to be trusted."""
    load = steady_details.get("load_avg_1m")
    cores = int(num(steady_details.get("cpu_count")))
    threads = int(num(steady_details.get("torch_threads")))
    if not isinstance(load, int | float) or cores < 1:
        return ""
    if load <= BUSY_LOAD_PER_CORE * cores:
        return ""
    return (
        f"the machine was busy while steady was timed (load average {load:.1f} on {cores} cores): "
        "its step times are not this machine's; re-run the pilot on an idle machine"
        + (f" (torch used {threads} thread(s))" if threads else "")
    )


def gpu_size(need_mb: float) -> int:
    """The smallest common GPU memory size (GB) that holds `need_mb`; 0 when none of them does."""
    return next((gb for gb in COMMON_GPU_GB if need_mb <= gb * 1024), 0)


def gpu_need(rows: Mapping[str, PhaseRow], config: str, headroom: float) -> dict[str, Any] | None:
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
            context = max(context, num(memory["nvml_used_mb"]) - num(memory.get("reserved_mb")))
    if peak <= 0:
        return None
    need = (peak + context) * (1 + headroom)
    return {
        "peak_reserved_mb": round(peak, 1),
        "cuda_context_mb": round(context, 1),
        "need_mb": round(need, 1),
        "smallest_gpu_gb": gpu_size(need),
    }


def memory_caption(sheet: Mapping[str, Any]) -> str:
    """The memory figure, saying what it is in its first words."""
    gpu = sheet.get("gpu_need")
    if gpu:
        size = f"{gpu['smallest_gpu_gb']} GB GPU" if gpu["smallest_gpu_gb"] else "more than 141 GB per GPU"
        return (
            f"per-GPU memory incl. CUDA context (NVML) {gpu['need_mb']:.0f} MiB = peak reserved "
            f"{gpu['peak_reserved_mb']:.0f} + context {gpu['cuda_context_mb']:.0f}, +{sheet['headroom']:.0%} "
            f"headroom: smallest common size {size}"
        )
    if str(sheet.get("memory_basis", "")).startswith("peak RSS"):
        return (
            f"runner process peak RSS on CPU — not GPU memory: {sheet['peak_mb']:.0f} MiB "
            f"(+{sheet['headroom']:.0%} headroom = {sheet['memory_per_gpu_mb']:.0f} MiB)"
        )
    return f"{sheet['memory_basis']}: {sheet['memory_per_gpu_mb']:.0f} MiB per GPU with headroom"


def annotate(plan: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """Add what a renter acts on to a computed plan: time ranges, GPU size, caveats (first)."""
    rows = newest_rows(data)
    sheet, package = plan["sheet"], plan["package"]
    config = sheet.get("kept") or "control"
    need = gpu_need(rows, config, num(sheet.get("headroom")))
    if need:
        sheet["gpu_need"] = need
    sheet["memory_caption"] = memory_caption(sheet)
    caveats: list[str] = []
    device = str((data.get("environment") or {}).get("device", sheet.get("device", "")))
    if device.startswith("cpu"):
        caveats.append(
            "measured on the CPU: times and memory are this CPU's, not a GPU's; "
            "re-run the pilot on the rented GPU before trusting the days"
        )
    caveats.append(f"memory: {sheet['memory_caption']}")
    for entry in package.get("order") or []:
        steady_row = rows.get(_key("steady", str(entry["id"])))
        steady = steady_row.details if steady_row is not None else {}
        span = interval(entry, steady)
        if span:
            entry["interval"] = span
        busy = busy_machine(steady)
        if busy and busy not in caveats:
            caveats.append(busy)
        threads = steady.get("torch_threads")
        if isinstance(threads, int):
            line = (
                f"step times hold at the pilot's torch thread count ({threads} threads "
                f"on {steady.get('cpu_count', '?')} cores): another thread count or other load changes them"
            )
            if line not in caveats:  # one line per distinct count, not one per configuration
                caveats.append(line)
    if "provisional" in plan:
        caveats.insert(0, str(plan["provisional"]))
    plan["caveats"] = caveats
    return plan


def provisional_plan(data: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of a record that stopped before its end, marked provisional (or why there is none)."""
    steps = _planned_steps(data)
    planned = set(steps)
    done = set(newest_rows(data))
    missing = [k for k in steps if k not in done]
    plan = compute_plan(data)
    plan["provisional"] = (
        f"PROVISIONAL: the campaign stopped after {len(done & planned)} of {len(planned)} steps "
        f"({len(missing)} not run{': ' + ', '.join(missing[:4]) + (', …' if len(missing) > 4 else '') if missing else ''})"
    )
    return annotate(plan, data)


def _planned_steps(data: Mapping[str, Any]) -> list[str]:
    return [s.key for s in campaign_steps(spec_of(data))]


def text_lines(plan: Mapping[str, Any]) -> list[str]:
    """What `pilot-tui plan` prints, caveats first, then the range beside each planned configuration."""
    lines = [f"! {c}" for c in plan.get("caveats") or []]
    if lines:
        lines.append("")
    body = plan_lines(plan)
    for o in (plan.get("package") or {}).get("order") or []:
        span = o.get("interval")
        if not span:
            continue
        text = (
            f"     {o['id']}: {o['end_h'] - o['start_h']:.2f} h, range {span['low_h']:.2f}–{span['high_h']:.2f} h "
            f"(steady p10 {span['step_p10_s']:.4g} s – p90 {span['step_p90_s']:.4g} s over "
            f"{span['steady_updates']} timed updates)"
        )
        at = next((i for i, line in enumerate(body) if line.startswith(f"  {o['position']}. ")), None)
        if at is not None:
            body.insert(at + 1, text)
    return lines + body
