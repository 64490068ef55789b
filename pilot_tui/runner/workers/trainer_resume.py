"""Process C of a trainer campaign's resume check: `python -m pilot_tui.runner.workers.trainer_resume`.

It captures the same script with the same arguments and environment as the runner did (nothing
is inherited but the command line and the environment), applies the same settings, calls
`train(resume_from_checkpoint=…)` and writes each step's loss, grad norm, LR (float.hex) and a
digest of the weights to `result.json`.

Started ahead of run A (`--checkpoint-from FILE`), it captures the script first, says so
(`captured` in its folder), then waits for the runner to write the checkpoint's path to FILE once
run A saved it: nothing but that path reaches it from run A.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..processes.fresh_process import RESULT_FILE, run_fresh_process
from ..processes.lifetime import die_with_parent
from ..subject.trainer.campaign import capture_for, load_checked
from ..subject.trainer.loop import train_steps
from ..subject.trainer.probe import StepProbe
from ..subject.trainer.resume_gate import CAPTURED_FILE, hexes
from ..subject.trainer.settings import apply_pilot_settings
from ..subject.trainer.worker_args import worker_parser

WAIT_PERIOD_S = 0.02


def _parser() -> argparse.ArgumentParser:
    p = worker_parser("pilot_tui.runner.workers.trainer_resume")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--checkpoint", type=Path)
    where.add_argument(
        "--checkpoint-from", type=Path, help="a file the runner writes the checkpoint's path to, once saved"
    )
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--runner-pid", type=int, default=0, help="with --checkpoint-from: stop if it ends")
    return p


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone (or the number is another user's now)
        return False
    return True


def checkpoint_of(args: argparse.Namespace) -> Path:
    """The checkpoint to resume from: given, or written by the runner once run A saved it (this
    process ends if the runner does first)."""
    if args.checkpoint is not None:
        return args.checkpoint
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / CAPTURED_FILE).write_text("")
    while not args.checkpoint_from.is_file():
        if args.runner_pid and not _alive(args.runner_pid):
            raise SystemExit("the runner that started this process ended before run A saved")
        time.sleep(WAIT_PERIOD_S)
    return Path(args.checkpoint_from.read_text().strip())


def resume(args: argparse.Namespace) -> None:
    die_with_parent()
    loaded = load_checked(args)
    t0 = time.perf_counter()
    trainer = capture_for(loaded).trainer
    capture_s = time.perf_counter() - t0  # the script again, up to its train(): the row says so
    apply_pilot_settings(trainer, args.out / "output")
    checkpoint = checkpoint_of(args)
    probe = StepProbe(digest=True)
    train_steps(trainer, args.steps, probe, resume=str(checkpoint))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [hexes(r) for r in probe.ordered()]
    (args.out / RESULT_FILE).write_text(json.dumps({"rows": rows, "capture_s": capture_s}))


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: resume(args))


if __name__ == "__main__":
    sys.exit(main())
