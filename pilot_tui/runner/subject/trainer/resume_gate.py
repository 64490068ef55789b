"""`resume` on a captured trainer: run A here saves at step k by the trainer's own checkpoint
code and continues to k + n; process C, new, captures the same script and resumes; steps
k+1…k+n must be bitwise the same.

On a CPU runner with a core to spare, process C starts ahead, with the LR board's first run: it
captures the script beside the board's runs (never timed), then waits for the checkpoint's path,
which the runner writes once run A saved it. Every other step waits for that capture to end first.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from packaging.version import Version

from ....core.atomic import write_text_atomic
from ....core.launch import launcher
from ....core.steps import Step
from ....core.verdict import PASS, WARN
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext
from ...processes import template
from ...processes.forked_call import core_to_spare
from ...processes.fresh_process import FreshProcess, FreshProcessFailed, start_fresh_process, wait_before_step
from . import loop
from .captured import adapter_of, from_start, probe_for, trainer_of
from .settings import RESUME_REFUSED
from .worker_args import worker_argv


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def collator_draws(adapter: Any, rows: int = 4) -> bool:
    """Whether the trainer's collator gives other batches under other RNG states (masking,
    augmentation, random truncation): collated twice, seeded apart, every RNG put back after."""
    train = adapter.train
    chosen = [train.dataset[i] for i in range(min(rows, len(train)))]
    py, npy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng():
            outs = []
            for seed in (1, 2):
                torch.manual_seed(seed)
                random.seed(seed)
                np.random.seed(seed)
                outs.append(dict(train.collate_fn(list(chosen))))
    finally:
        random.setstate(py)
        np.random.set_state(npy)
    return not _same(*outs)


def resume_causes(trainer: Any, adapter: Any = None) -> tuple[list[str], list[str]]:
    """(refusals, known library causes of inexactness) for this trainer's settings."""
    a = trainer.args
    refused = [f"{k} = true: {why}" for k, why in RESUME_REFUSED.items() if getattr(a, k, False)]
    causes = []
    if Version(transformers.__version__) < Version("5.0"):
        causes.append(
            f"transformers {transformers.__version__} < 5.0: resume inside epoch ≥ 1 reads another data order "
            "and skips the last accumulation window (fixed in 5.0)"
        )
    if a.dataloader_num_workers > 0:
        causes.append(
            f"dataloader_num_workers = {a.dataloader_num_workers}: worker seeds differ after a resume"
        )
    sampling = getattr(
        a, "train_sampling_strategy", "group_by_length" if getattr(a, "group_by_length", False) else ""
    )
    if sampling in ("group_by_length", "batch_rebalance"):
        causes.append(f"{sampling} sampling: the length-grouped sampler draws from the global RNG")
    collator = trainer.data_collator
    if adapter is not None and collator_draws(adapter):
        name = getattr(collator, "__name__", type(collator).__name__)
        causes.append(
            f"the collator {name} draws from the RNG (its batches change with the seed): after a resume the "
            "trainer restores the RNG only once the first window is fetched, so that window draws other values"
        )
    return refused, causes


COMPARED = ("loss", "grad_norm", "learning_rate", "digest")


def compare_steps(
    a_rows: dict[int, dict[str, Any]], c_rows: dict[int, dict[str, Any]], steps: range
) -> tuple[list[dict[str, Any]], tuple[int, list[str]] | None]:
    """Per step, whether run C logged exactly run A's values; and the first step that differs.
    A value missing on either side is a difference, never two Nones compared equal."""
    compared, first = [], None
    for step in steps:
        a, c = a_rows.get(step, {}), c_rows.get(step, {})
        same = {key: a.get(key) is not None and a.get(key) == c.get(key) for key in COMPARED}
        compared.append(
            {
                "step": step,
                **{f"{key}_same": v for key, v in same.items()},
                "loss_a": a.get("loss"),
                "loss_c": c.get("loss"),
            }
        )
        if first is None and not all(same.values()):
            first = (step, [key for key, v in same.items() if not v])
    return compared, first


def hexes(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v).hex() if isinstance(v, float) else v) for k, v in row.items()}


AHEAD_KEY = "resume.process_c_ahead"
# Written by process C started ahead once the script reached its train() (workers/trainer_resume.py).
CAPTURED_FILE = "captured"


@dataclass
class Ahead:
    """Process C started before its step, and what it was started with."""

    worker: FreshProcess
    argv: list[str]
    ready: Path
    beside: list[str] = field(default_factory=list)

    def captured(self) -> bool:
        return (self.worker.out_dir / CAPTURED_FILE).is_file() or self.worker.proc.poll() is not None


def capture_running(ctx: RunContext) -> bool:
    """Process C, started ahead, is still running the script up to its `train()`."""
    found: Ahead | None = ctx.memo.get(AHEAD_KEY)
    return found is not None and not found.captured()


def _c_argv(ctx: RunContext, out: Path) -> tuple[Path, list[str]]:
    k, n = ctx.spec.resume.k, ctx.spec.resume.n
    c_dir = out / "run-c"
    return c_dir, [*worker_argv(ctx, c_dir), "--steps", str(k + n)]


def start_ahead(ctx: RunContext, step: Step) -> None:
    """Process C started now, beside an untimed step, where it gains: a CPU runner that leaves a
    core idle, a new process that starts cheaply, one process, the resume still to run."""
    found: Ahead | None = ctx.memo.get(AHEAD_KEY)
    if found is not None:
        if not found.captured():
            found.beside.append(step.key)
        return
    tmpl = template.current()
    # A new process starts cheaply: forked from the template once its imports are paid, or
    # through a launcher that decides how (core/launch.py).
    cheap = (tmpl is not None and tmpl.ready()) or bool(launcher())
    if (
        "resume" in ctx.spec.phases.skip
        or any(r.get("name") == "resume" for r in ctx.rows)
        or ctx.device.type != "cpu"
        or ctx.spec.distributed.strategy != "none"
        or not core_to_spare()
        or not cheap
        or resume_causes(trainer_of(ctx))[0]  # refused: the step says why, nothing to start
    ):
        return
    out = ctx.work_dir / "trainer-resume"
    c_dir, argv = _c_argv(ctx, out)
    ready = out / "run-c-checkpoint.txt"
    ready.unlink(missing_ok=True)
    (c_dir / CAPTURED_FILE).unlink(missing_ok=True)
    worker = start_fresh_process(
        "pilot_tui.runner.workers.trainer_resume",
        [*argv, "--checkpoint-from", str(ready), "--runner-pid", str(os.getpid())],
        c_dir,
    )
    ctx.memo[AHEAD_KEY] = Ahead(worker, argv, ready, [step.key])


def settle_ahead(ctx: RunContext, step: Step) -> None:
    """Before a step that is not the resume's: process C's capture (if it started ahead) ends
    first, so no timed step shares the CPU with it."""
    found: Ahead | None = ctx.memo.get(AHEAD_KEY)
    if found is None:
        return
    limit = ctx.spec.limit_for("resume").time_s or 900.0
    what = "the resume's new process to finish running the script"
    if not wait_before_step(ctx, step.key, found.captured, what, limit):
        found.worker.kill()  # the resume step starts its own
        ctx.memo.pop(AHEAD_KEY, None)


def _taken_ahead(ctx: RunContext, argv: list[str]) -> Ahead | None:
    """Process C started ahead for these arguments and still waiting, else None: one started for
    other arguments, or one that ended already (its script failed), is stopped and a new one runs."""
    found: Ahead | None = ctx.memo.pop(AHEAD_KEY, None)
    if found is None:
        return None
    if found.argv != argv or found.worker.proc.poll() is not None:
        found.worker.kill()
        return None
    return found


def resume(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer = trainer_of(ctx)
    k, n = ctx.spec.resume.k, ctx.spec.resume.n
    refused, causes = resume_causes(trainer, adapter_of(ctx))
    if refused:
        raise PhaseFailure("a resume test would mean nothing: " + "; ".join(refused), {"refused": refused})
    out = ctx.work_dir / "trainer-resume"
    c_dir, argv = _c_argv(ctx, out)
    saved_dir = trainer.args.output_dir
    trainer.args.output_dir = str(out / "run-a")
    from_start(ctx)
    probe = probe_for(ctx, run, save_at=(k,), digest=True)
    run.current_input = {"k": k, "n": n, "run": "A (this process)"}
    try:
        loop.train_steps(trainer, k + n, probe)
    finally:
        trainer.args.output_dir = saved_dir
    checkpoint = out / "run-a" / f"checkpoint-{k}"
    if not checkpoint.is_dir():
        raise PhaseFailure(f"run A saved no checkpoint at step {k} ({checkpoint})")
    a_rows = {r["step"]: hexes(r) for r in probe.ordered()}
    run.current_input = {"k": k, "n": n, "run": "C (a new process)"}
    # Taken once run A saved: a run A that failed leaves it waiting for the step's next try.
    ahead = _taken_ahead(ctx, argv)
    if ahead is not None:
        # Process C ran the script up to its train() beside untimed steps: only the path goes to it.
        write_text_atomic(ahead.ready, str(checkpoint))
        worker = ahead.worker
    else:
        worker = start_fresh_process(
            "pilot_tui.runner.workers.trainer_resume", [*argv, "--checkpoint", str(checkpoint)], c_dir
        )
    try:
        said = (
            run.step.key,
            k + n,
            k + n + 1,
            "process C: the script runs again up to train(), then resumes",
        )
        result, seconds = worker.wait(ctx, timeout_s=ctx.spec.limit_for("resume").time_s or 900.0, said=said)
    except FreshProcessFailed as exc:
        raise PhaseFailure(f"the resumed process failed: {exc}", {"stderr": exc.stderr}) from None
    c_rows = {int(r["step"]): r for r in result["rows"]}
    compared, first_diff = compare_steps(a_rows, c_rows, range(k + 1, k + n + 1))
    details: dict[str, Any] = {
        "k": k,
        "n": n,
        "checkpoint": str(checkpoint),
        "steps": compared,
        "resume_process_s": seconds,
        "resume_process_start": result.get("process_start", ""),
        "resume_capture_s": result.get("capture_s"),
        "resume_process_ahead": (
            f"started before run A, beside {' · '.join(ahead.beside)}: it ran the script up to its "
            "train() there, then waited for run A's checkpoint"
            if ahead is not None
            else ""
        ),
        "causes": causes,
        "compared": "loss, grad_norm, learning_rate (float.hex) and a sha256 of every parameter, per step",
    }
    if ctx.spec.distributed.strategy != "none":
        # Run A and process C are one process each (the runner's own capture): see docs/trainer.md.
        details["one_process"] = (
            f"run A and process C ran on one process, not on the campaign's {ctx.spec.batch.replicas} ranks: "
            "the script's checkpoint and resume path is checked, not a resume of every rank's RNG and data share"
        )
    if first_diff is not None:
        step, keys = first_diff
        named = f"; known causes in this setup: {'; '.join(causes)}" if causes else ""
        if causes:
            details["first_step"] = f"rule out the known cause first: {causes[0]}"
        raise PhaseFailure(
            f"the resumed run differs from the uninterrupted one from step {step} ({', '.join(keys)}) "
            f"after resuming at step {k}{named}",
            details,
        )
    if len(c_rows) < n:
        raise PhaseFailure(f"the resumed process logged {len(c_rows)} of {n} steps", details)
    note = f" (warn: {'; '.join(causes)})" if causes else ""
    note += " (on one process)" if "one_process" in details else ""
    again = result.get("capture_s")
    when = f" ahead, beside {' · '.join(ahead.beside)}" if ahead is not None else ""
    rerun = (
        f" (the script ran again up to its train() there{when}: {again:.1f} s)" if again is not None else ""
    )
    return Outcome(
        WARN if causes else PASS,
        f"resumed at step {k} in a new process{rerun}: steps {k + 1}…{k + n} bitwise identical (loss, grad "
        f"norm, LR, weights){note}",
        details,
    )
