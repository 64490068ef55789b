"""Process C of a trainer campaign's resume check: `python -m pilot_tui.runner.workers.trainer_resume`.

It captures the same script with the same arguments and environment as the runner did (nothing
is inherited but the command line and the environment), applies the same settings, calls
`train(resume_from_checkpoint=…)` and writes each step's loss, grad norm, LR (float.hex) and a
digest of the weights to `result.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..processes.fresh_process import RESULT_FILE, run_fresh_process
from ..processes.lifetime import die_with_parent
from ..subject.trainer.campaign import capture_for, load_checked
from ..subject.trainer.loop import train_steps
from ..subject.trainer.probe import StepProbe
from ..subject.trainer.resume_gate import hexes
from ..subject.trainer.settings import apply_pilot_settings
from ..subject.trainer.worker_args import worker_parser


def _parser() -> argparse.ArgumentParser:
    p = worker_parser("pilot_tui.runner.workers.trainer_resume")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--steps", type=int, required=True)
    return p


def resume(args: argparse.Namespace) -> None:
    die_with_parent()
    loaded = load_checked(args)
    t0 = time.perf_counter()
    trainer = capture_for(loaded).trainer
    capture_s = time.perf_counter() - t0  # the script again, up to its train(): the row says so
    apply_pilot_settings(trainer, args.out / "output")
    probe = StepProbe(digest=True)
    train_steps(trainer, args.steps, probe, resume=str(args.checkpoint))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [hexes(r) for r in probe.ordered()]
    (args.out / RESULT_FILE).write_text(json.dumps({"rows": rows, "capture_s": capture_s}))


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: resume(args))


if __name__ == "__main__":
    sys.exit(main())
