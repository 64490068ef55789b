"""A fresh capture for a trainer variant: `python -m pilot_tui.runner.workers.trainer_variant`.

A variant that changes what the script fixes when it builds its trainer (precision, max length,
FSDP: `args` / `env` in `[[variants]]`) cannot be built in the runner: a second
`TrainingArguments` there would reset the accelerate state the captured trainer holds. This
process, new (nothing inherited but its command line, the files it names and the runner's torch
thread count), captures the same script with the variant's argv and environment, applies the same
pilot settings and runs the variant's phases through the same gate bodies and the same `execute`
as the runner, so each row holds this process's own memory and time. The rows so far are written
to `result.json` after each phase: a process that dies mid-phase still hands back the rows done.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
from typing import Any

from ...core.atomic import write_text_atomic
from ...core.steps import Step
from ..memory import heap
from ..phases import base
from ..processes.fresh_process import RESULT_FILE, run_fresh_process
from ..processes.lifetime import die_with_parent
from ..subject.trainer.campaign import fresh_capture_spec, load_checked, open_trainer_campaign
from ..subject.trainer.worker_args import worker_parser


def _parser() -> argparse.ArgumentParser:
    p = worker_parser("pilot_tui.runner.workers.trainer_variant")
    p.add_argument("--variant", required=True)
    p.add_argument("--phases", required=True, help="comma-separated: the variant's phases to run, in order")
    p.add_argument("--overrides", default="{}", help="JSON: the step's overrides (a rerun from the view)")
    return p


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def run_variant(args: argparse.Namespace) -> None:
    die_with_parent()
    loaded = load_checked(args)
    variant = next((v for v in loaded.spec.variants if v.id == args.variant), None)
    if variant is None:
        raise ValueError(f"{args.spec}: no variant {args.variant!r}")
    loaded = fresh_capture_spec(loaded, variant)
    # The runner builds the variant's comparison entry from the rows handed back: the hooks
    # (parking other states, the entry) have nothing to do in this process.
    base.BEFORE_STEP.clear()
    base.AFTER_ROW.clear()
    ctx = open_trainer_campaign(loaded, lambda _msg: None, args.out, threading.Event())
    heap.keep_opened()  # each phase's train() collects: it walks the phases' objects only
    cap = ctx.memo["trainer_capture"]
    capture: dict[str, Any] = {
        "argv": cap["argv"],
        "env": dict(loaded.spec.task.env),
        "capture_s": round(cap["seconds"], 4),
        "capture_rss_mb": cap["rss_mb"],
        "precision": ctx.spec.batch.precision,
        "device": str(ctx.device),
    }
    overrides = json.loads(args.overrides)
    rows: list[dict[str, Any]] = []
    for name in args.phases.split(","):
        rows.append(base.execute(ctx, Step.of(name, args.variant), overrides))
        done = {"capture": capture, "rows": rows, "process_peak_rss_mb": _peak_rss_mb()}
        write_text_atomic(args.out / RESULT_FILE, json.dumps(done))


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: run_variant(args))


if __name__ == "__main__":
    sys.exit(main())
