"""The runner's side of a variant built by a fresh capture (`args` / `env` in `[[variants]]`).

Its first phase (`first_step@V`, or the first one not skipped) starts one process
(`variant_worker.py`) that captures the script with the variant's argv and environment and runs
all of the variant's remaining phases; the rows it hands back are kept and each of the variant's
steps returns its own, with that process's memory and time. A rerun with overrides, or a phase
under a declared `time_s` ceiling (the ceiling must not cover the other phases' work), gets a
process of its own. A process that fails (the script raises with the new arguments) fails every
phase it did not finish with its one line; nothing else of the campaign is touched.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from typing import Any

from ....core import phase_table
from ....core.spec import CampaignSpec
from ....core.verdict import Verdict
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext
from ...processes.fresh_process import RESULT_FILE, FreshProcessFailed, start_fresh_process
from .worker_args import worker_argv

KEPT = "trainer_fresh_variants"  # ctx.memo: variant -> {phase: its row, or the failure line}
WORKER = "pilot_tui.runner.workers.trainer_variant"


def runs_fresh(ctx: RunContext, variant: str) -> bool:
    return variant != "control" and ctx.variant_spec(variant).fresh_capture


def phases_for(spec: CampaignSpec, phase: str, overrides: dict[str, Any]) -> list[str]:
    """The phases one process runs: this one, then the variant's later ones (not skipped); this one
    alone for a rerun with overrides or under a `time_s` ceiling (it must not cover the others)."""
    order = [p for p in phase_table.per_variant() if p not in spec.phases.skip]
    later = order[order.index(phase) + 1 :] if phase in order else []
    if overrides or any(spec.limit_for(p).time_s for p in [phase, *later]):
        return [phase]
    return [phase, *later]


def command_line(ctx: RunContext, variant: str) -> dict[str, Any]:
    """What the fresh capture runs: the script, its argv and the environment set for it."""
    t, v = ctx.spec.task, ctx.variant_spec(variant)
    return {
        "script": ctx.memo["trainer_capture"]["script"],
        "argv": [*t.args, *v.args],
        "variant_args": list(v.args),
        "env": t.env | v.env,
        "variant_env": dict(v.env),
    }


def _start(ctx: RunContext, run: PhaseRun, phases: list[str]) -> dict[str, Any]:
    """Run the worker; {phase: row or failure line} for every phase it was given."""
    variant = run.step.variant
    out = ctx.work_dir / f"trainer-variant-{variant}"
    worker = start_fresh_process(
        WORKER,
        [
            *worker_argv(ctx, out),
            "--variant", variant,
            "--phases", ",".join(phases),
            "--overrides", json.dumps(run.overrides),
        ],
        out,
    )  # fmt: skip
    ceilings = [ctx.spec.limit_for(p).time_s for p in ["load", *phases]]
    timeout = sum(ceilings) if all(ceilings) else math.inf  # no ceiling declared: none here either
    run.current_input = {"variant": variant, "fresh_capture": shlex.join(command_line(ctx, variant)["argv"])}
    try:
        said = (
            run.step.key,
            0,
            1,
            "a fresh capture: the script runs again with the variant's args up to train()",
        )
        result, seconds = worker.wait(ctx, timeout_s=timeout, said=said)
        failure = ""
    except FreshProcessFailed as exc:
        # The rows it finished before it failed are kept (written after each phase).
        path = out / RESULT_FILE
        result = json.loads(path.read_text()) if path.is_file() else {}
        seconds, failure = time.monotonic() - worker.started, str(exc)
    return handed_back(result, phases, failure, seconds)


def handed_back(result: dict[str, Any], phases: list[str], failure: str, seconds: float) -> dict[str, Any]:
    """{phase: its row, or the line it fails with} from what the process wrote: a phase it did
    not finish fails with the process's last line, the rows before it are kept."""
    capture = dict(result.get("capture") or {})
    capture |= {"process_s": round(seconds, 4), "process_peak_rss_mb": result.get("process_peak_rss_mb")}
    if result.get("process_start"):  # absent when the process died before its result
        capture["process_start"] = result["process_start"]
    kept: dict[str, Any] = {row["name"]: row | {"capture": capture} for row in result.get("rows", [])}
    what = (
        f"the fresh capture's process ended after {', '.join(kept)}"
        if kept
        else "the fresh capture with the variant's args/env failed"
    )
    for p in phases:
        kept.setdefault(p, f"{what}: {failure or 'it wrote no row'}")
    return kept


def fresh_phase(ctx: RunContext, run: PhaseRun) -> Outcome:
    """This variant phase's row from its fresh capture: the kept one, or a new process."""
    variant, phase = run.step.variant, run.step.phase
    kept = ctx.memo.setdefault(KEPT, {}).setdefault(variant, {})
    found = kept.pop(phase, None) if not run.overrides else None
    started = found is None  # this phase waits for the script to run again: its row says so
    if found is None:
        fresh = _start(ctx, run, phases_for(ctx.spec, phase, run.overrides))
        found = fresh.pop(phase)
        if not run.overrides:
            kept.update(fresh)  # the variant's later phases, run by the same process
    said = command_line(ctx, variant)
    if isinstance(found, str):
        raise PhaseFailure(found, {"fresh_capture": said})
    capture = found["capture"]
    changed = [f"args + {shlex.join(said['variant_args'])}"] if said["variant_args"] else []
    changed += [f"env {k}={v}" for k, v in said["variant_env"].items()]
    note = f"a fresh capture of the script with {', '.join(changed)}"
    params = dict(found["params"])
    params["notes"] = [*params.get("notes", []), note]
    reason = found["reason"]
    if started and isinstance(capture.get("capture_s"), int | float):
        reason += f" · {note}: the script ran again up to its train() in {capture['capture_s']:.1f} s"
    return Outcome(
        Verdict(found["verdict"]),
        reason,
        dict(found["details"]) | {"fresh_capture": said | capture},
        params,
        cancelled=bool(found.get("cancelled")),
        duration_s=float(found["duration_s"]),
        memory=dict(found["memory"]),
        checked_elsewhere=True,
    )
