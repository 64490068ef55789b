"""`resume`: train k, save everything, resume in a new process for n more, compare (R15).

The uninterrupted run of k + n updates happens here, in the runner; the resumed run happens in
`workers/resume.py`, a fresh Python process that knows only the spec and the checkpoint. Both
observe the same quantities with the same code (`resume_check`).

Test hook (not a spec key): the override `break_resume = "scheduler"` saves the LR scheduler as
if it had just been created, and `break_resume = "data"` saves the data position as the start of
the first epoch, so the tests can show that a broken resume fails and names what differs.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ....core.events import RecordUpdate
from ....core.hashing import artifact_entry
from ...checks import finiteness
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext
from ...distributed import state as dist_state
from ...distributed.sharded import kind_for, save_sharded
from ...loop import resume_edges
from ...loop.checkpoint import rest_state, rng_state, set_rng_state, training_state, write_checkpoint
from ...loop.resume_check import (
    NONDETERMINISTIC_RTOL,
    RESHARD_RTOL,
    compare,
    final_tensors,
    next_draws,
    observe_update,
)
from ...memory.probes import release_cache
from ...processes.determinism import deterministic
from ...processes.fresh_process import (
    EXIT_REFUSED,
    FreshProcessFailed,
    Said,
    context_args,
    read_tensors,
    start_fresh_process,
)
from ...safe_load import UnsafeLoadError
from .artifacts import FORMATS, unused_path

BREAKS = ("scheduler", "data", "epoch")
# An epoch at most this many updates long gets its own resume at the boundary (resume_edges).
EPOCH_EDGE_MAX_UPDATES = 64
# Only the first rows of the per-update table go into the record; the checks cover all of them.
TABLE_ROWS = 64


def _break(payload: dict[str, Any], how: str) -> None:
    """Spoil a copy of the checkpoint the way real resumes go wrong (test hook)."""
    if how == "epoch":
        return  # spoils the epoch-boundary edge only (resume_edges.skip_next_epoch)
    if how == "scheduler":
        sched = dict(payload["scheduler"])
        sched["last_epoch"], sched["_step_count"] = 0, 1  # the schedule starts over
        payload["scheduler"] = sched
    elif how == "data":
        payload["data"] = dict(payload["data"]) | {"epoch": 0, "position": 0}  # the data starts over


def comparison_tolerance(exact: bool, declared: float, ops: list[str]) -> tuple[float, str]:
    """The tolerance of the comparison and the sentence the row gives for it.

    CPU: always bitwise. CUDA: bitwise under deterministic algorithms unless the campaign
    declared a tolerance; where a kernel has no deterministic version (`ops`), a per-tensor
    relative tolerance — the declared one, else NONDETERMINISTIC_RTOL — naming those kernels.
    """
    if exact:
        return 0.0, "bitwise"
    if ops:
        tol = declared or NONDETERMINISTIC_RTOL
        return tol, f"within {tol:g} relative per tensor: no deterministic CUDA kernel for {', '.join(ops)}"
    if declared:
        return declared, f"within {declared:g} relative per tensor (declared resume.tolerance)"
    return 0.0, "bitwise (deterministic algorithms, CUBLAS_WORKSPACE_CONFIG set)"


def _refuse_non_finite_run(
    reference: list[dict[str, Any]], tensors: dict[str, torch.Tensor], k: int, n: int, entry: dict[str, Any]
) -> None:
    """Finiteness first: an uninterrupted run that diverged cannot tell a good resume from a
    bad one (NaN never equals NaN), and the new process would only diverge too."""
    bad_loss = next((r for r in reference if not math.isfinite(r["loss"])), None)
    bad = finiteness.non_finite({key: v for key, v in tensors.items() if key.startswith("model/")})
    if bad_loss is None and not bad:
        return
    where = (
        f"its loss is non-finite from update {bad_loss['step']}"
        if bad_loss
        else "its weights hold NaN or inf"
    )
    raise PhaseFailure(
        f"the uninterrupted run of {k} + {n} updates is not finite ({where}): the resume is not compared, "
        "fix the divergence first (see steady)",
        {"artifact": entry, "non_finite_tensors": [name for name, _ in bad[:10]]},
    )


def timed_skip(ctx: RunContext, sampler: Any, max_length: int, updates: int) -> dict[str, Any]:
    """What a resume that re-reads its data to the saved position costs (transformers'
    `skip_first_batches` draws and collates every skipped batch): the first `updates` updates'
    microbatches collated from the start of the epoch, nothing computed. This runner's own
    sampler jumps there in O(1); the plan projects this figure for a run that skips by reading."""
    replay = copy.deepcopy(sampler)
    replay.epoch, replay.position = 0, 0
    microbatches = examples = 0
    t = time.perf_counter()
    for _ in range(updates):
        for micro in replay.next_update():
            ctx.task.collate([ctx.task.examples[i] for i in micro], max_length)
            microbatches += 1
            examples += len(micro)
    return {
        "skip_updates": updates,
        "skip_microbatches": microbatches,
        "skip_examples": examples,
        "skip_s": round(time.perf_counter() - t, 6),
    }


def resume(ctx: RunContext, run: PhaseRun) -> Outcome:
    spec = ctx.spec.resume
    overrides = dict(run.overrides)
    breaking = str(overrides.pop("break_resume", "") or "")
    if breaking and breaking not in BREAKS:
        raise PhaseFailure(f"break_resume must be one of {', '.join(BREAKS)}, got {breaking!r}")
    kind_override = overrides.pop("checkpoint", "")
    k, n = spec.k, spec.n
    variant = run.step.variant
    config = ctx.config(variant, overrides)
    kind = kind_for(str(kind_override or ctx.spec.distributed.checkpoint), config.strategy)
    # A sharded checkpoint on several ranks is also resumed at another world size (R28).
    reshard = kind == "sharded" and dist_state.world() > 1 and not breaking
    exact = ctx.device.type == "cpu"
    grad_clip = ctx.spec.optim.grad_clip
    timings: dict[str, float] = {}
    total = k + n + 1  # the last unit is the new process

    # Deterministic kernels on both sides (runner/processes/determinism.py); the ops that have none are
    # collected (when the block ends) so the comparison can say why it needs a tolerance.
    with deterministic() as nondeterministic:
        # A fresh state of its own: the check never moves the campaign's control state.
        t0 = time.perf_counter()
        state = ctx.new_state(config)
        per_epoch = state.sampler.updates_per_epoch
        for i in range(k):
            ctx.check_cancel()
            run.current_input = {"update": i + 1, "of": k + n, "microbatch": config.microbatch}
            observe_update(state, ctx.task, ctx.device, grad_clip)
            ctx.progress(run.step.key, i + 1, total, message="before the save")
        timings["train_k_s"] = time.perf_counter() - t0
        skip = timed_skip(ctx, state.sampler, config.max_length, k)

        t = time.perf_counter()
        saved_position = state.sampler.state_dict()
        suffix = ".dcp" if kind == "sharded" else ".pt"
        name = f"resume-{variant}-step{k}{'-broken-' + breaking if breaking else ''}{suffix}"
        path = dist_state.from_rank0(unused_path(ctx.work_dir / name))
        if kind == "sharded":  # every rank writes its shards
            edit = (lambda own: _break(own, breaking)) if breaking else None
            timings["save_rank_s"] = save_sharded(state, path, rest_state(state), edit)["save_s"]
        else:
            payload = training_state(state)
            if breaking:
                _break(payload, breaking)
            if dist_state.is_rank0():  # one full copy (gathered state dict), written by rank 0 alone
                write_checkpoint(payload, path)
            dist_state.barrier()
            del payload
        entry = artifact_entry(
            path,
            "resume_checkpoint",
            phase="resume",
            variant=variant,
            step=k,
            broken=breaking or None,
            format=FORMATS[kind],
            world_size=dist_state.world(),
        )
        ctx.emit(RecordUpdate(section="artifacts", value={k2: v for k2, v in entry.items() if v is not None}))
        timings["save_s"] = time.perf_counter() - t

        # The uninterrupted run goes on in this process first; the new process starts after it, so
        # the two never compete for the CPU threads (OpenMP threads of two busy processes on the
        # same cores slow each other down many times over).
        t = time.perf_counter()
        reference = []
        for i in range(n):
            ctx.check_cancel()
            run.current_input = {"update": k + i + 1, "of": k + n, "microbatch": config.microbatch}
            reference.append(observe_update(state, ctx.task, ctx.device, grad_clip))
            ctx.progress(run.step.key, k + i + 1, total, message="uninterrupted")
        rng_before_draws = rng_state()
        ref_python_draw, ref_draws = next_draws(ctx.device)
        ref_tensors = {key: v.cpu().clone() for key, v in (final_tensors(state) | ref_draws).items()}
        timings["uninterrupted_n_s"] = time.perf_counter() - t
        further: list[dict[str, Any]] = []
        further_tensors: dict[str, torch.Tensor] = {}
        if reshard:
            # n more updates: what the run resumed on 1 rank and saved again at k + n must be
            # followed by on the full world size. The draws above must not shift that run's RNG.
            set_rng_state(rng_before_draws)
            for _ in range(n):
                ctx.check_cancel()
                further.append(observe_update(state, ctx.task, ctx.device, grad_clip))
            further_tensors = {key: v.cpu().clone() for key, v in final_tensors(state).items()}

        ref_scaler = {key: float(v) for key, v in state.scaler.state_dict().items()}
    # The worker needs the device: what the comparison needs is on the host now; the rest is
    # released (this check's state) or parked (the campaign's), and the cache emptied (R15).
    del state
    ctx.park_all()
    release_cache(ctx.device)
    _refuse_non_finite_run(reference, ref_tensors, k, n, entry)
    if not dist_state.is_rank0():
        # Rank 0 starts the new process group and compares; this rank's part (its shard of the
        # uninterrupted run and of the gathered checkpoint) is done.
        return Outcome(details={"k": k, "n": n, "note": "rank 0 resumes in a new process group and compares"})

    out_dir = path.with_suffix(".worker")
    ctx.progress(run.step.key, k + n, total, message="resuming in a new process")
    said = (run.step.key, k + n, total, "resuming in a new process")
    result, res_tensors, worker_s = _resumed(
        ctx, path, entry, config, n, out_dir, dist_state.world(), {"break_resume": breaking}, said=said
    )
    timings["new_process_s"] = worker_s
    ops = sorted(set(nondeterministic) | set(result.get("nondeterministic_ops", [])))
    tol, comparison = comparison_tolerance(exact, spec.tolerance, ops)
    cmp = compare(
        reference,
        result["updates"],
        ref_tensors,
        res_tensors,
        ref_python_draw,
        float(result["python_draw"]),
        tol,
    )
    if ref_scaler:
        cmp.checks["grad_scaler"] = {"ok": ref_scaler == result["scaler"], "uninterrupted": ref_scaler}
        if ref_scaler != result["scaler"]:
            cmp.differ(k + n, "grad scaler state", ref_scaler, result["scaler"])
    epochs = sorted({int(r["epoch"]) for r in reference})
    timings["total_s"] = time.perf_counter() - t0
    details: dict[str, Any] = {
        "k": k,
        "n": n,
        "variant": variant,
        "updates_per_epoch": per_epoch,
        "crosses_epoch_boundary": len(epochs) > 1,
        "epochs_after_resume": epochs,
        "saved_position": saved_position,
        "resumed_at": result["resumed_at"],
        # The sampler jumps to (epoch, position): batches drawn in the new process = n, never k + n.
        "batches_drawn_after_resume": len(result["updates"]),
        "comparison": comparison,
        "nondeterministic_ops": ops,
        "checks": cmp.checks,
        "first_difference": cmp.first,
        "per_update": [
            {
                "update": int(a["step"]),
                "epoch": int(a["epoch"]),
                "lr": a["lr"],
                "lr_resumed": b["lr"],
                "loss": a["loss"],
                "loss_resumed": b["loss"],
                "same_batch": a["batch"] == b["batch"],
            }
            for a, b in list(zip(reference, result["updates"], strict=False))[:TABLE_ROWS]
        ],
        "artifact": entry,
        "break_resume": breaking or None,
        "new_process": {
            "seconds": round(worker_s, 3),
            "start": result.get("process_start", ""),
            "threads": torch.get_num_threads(),
            "inside_s": {key: round(v, 4) for key, v in result.get("timings_s", {}).items()},
        },
        "timings_s": {key: round(v, 4) for key, v in timings.items()},
        **skip,
    }
    if not cmp.ok:
        raise PhaseFailure(cmp.reason(), details)
    if reshard:
        details["reshard"] = _reshard(
            ctx, run, path, entry, config, k, n, reference, ref_tensors, further, further_tensors
        )
        details["timings_s"]["total_s"] = round(time.perf_counter() - t0, 4)
        bad = next((leg for leg in details["reshard"] if not leg["ok"]), None)
        if bad is not None:
            raise PhaseFailure(
                f"resumed on {bad['ranks']} rank(s) from {bad['from_ranks']}: {bad['reason']}", details
            )
    # In this process only: under torchrun rank 0 alone gets here, and a wrapped state's
    # collectives would wait for ranks that have left the phase.
    edges = (
        resume_edges.edge_cases(
            ctx.new_state,
            ctx.task,
            config,
            ctx.device,
            grad_clip,
            k,
            n,
            ctx.spec.batch.num_workers,
            per_epoch,
            EPOCH_EDGE_MAX_UPDATES,
            resume_edges.skip_next_epoch if breaking == "epoch" else None,
        )
        if dist_state.world() == 1
        else []
    )
    details["edges"] = edges
    broken = next((e for e in edges if not e["ok"]), None)
    if broken is not None:
        raise PhaseFailure(resume_edges.reason(broken), details)
    notes = []
    if len(epochs) < 2 and not any(e["case"] == "epoch_boundary" for e in edges):
        notes.append(
            f"k + n = {k + n} stays inside one epoch of {per_epoch} updates: the epoch boundary is not "
            "covered (choose k just below a multiple of updates_per_epoch)"
        )
    details["notes"] = notes
    details["checkpoint"] = kind
    return Outcome(details=details)


def _resumed(
    ctx: RunContext,
    path: Path,
    entry: dict[str, Any],
    config,
    n: int,
    out_dir: Path,
    nproc: int,
    context: dict[str, Any],
    extra_args: tuple[str, ...] = (),
    said: Said | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """Resume `path` in a new process (a new group of `nproc` ranks) for n updates; its result."""
    args = [
        *context_args(ctx),
        "--out",
        str(out_dir),
        "--checkpoint",
        str(path),
        "--sha256",
        entry["sha256"],
        "--size",
        str(entry["size"]),
        "--config",
        json.dumps(config.params()),
        "--updates",
        str(n),
        *extra_args,
    ]
    if entry.get("files") is not None:
        args += ["--files", str(entry["files"])]
    worker = start_fresh_process("pilot_tui.runner.workers.resume", args, out_dir, nproc=nproc)
    try:
        result, worker_s = worker.wait(ctx, said=said)
    except FreshProcessFailed as exc:
        what = "refused the checkpoint" if exc.code == EXIT_REFUSED else f"failed (exit {exc.code})"
        where = (
            f"the resumed process on {nproc} rank(s)"
            if nproc != dist_state.world()
            else "the resumed process"
        )
        raise PhaseFailure(
            f"{where} {what}: {exc}", {"artifact": entry, "worker_stderr": exc.stderr} | context
        ) from None
    try:
        return result, read_tensors(result), worker_s
    except UnsafeLoadError as exc:
        raise PhaseFailure(f"the resumed process's output was refused: {exc}") from None


def _reshard(
    ctx: RunContext,
    run: PhaseRun,
    path: Path,
    entry: dict[str, Any],
    config,
    k: int,
    n: int,
    reference: list[dict[str, Any]],
    ref_tensors: dict[str, torch.Tensor],
    further: list[dict[str, Any]],
    further_tensors: dict[str, torch.Tensor],
) -> list[dict[str, Any]]:
    """The sharded checkpoint of N ranks resumed on 1 (which saves again at k + n), then that one
    resumed on N: each leg's n updates and final state against the uninterrupted run's.

    Not bitwise: another world size sums the same gradients in another order (one process folds
    the ranks into its accumulation: the same global batch). Step, LR and batch ids must still be
    identical, losses, weights and moments equal within a relative tolerance.
    """
    world = dist_state.world()
    tol = ctx.spec.resume.tolerance or RESHARD_RTOL
    one = replace(config, accumulation=config.accumulation * world, replicas=1, strategy="none")
    legs = []
    # N → 1: the whole global batch in one process; its batch ids are the global update's, whose
    # head is rank 0's share (what the uninterrupted run on rank 0 recorded).
    to_one = path.with_name(path.stem + "-on1.dcp")
    result, tensors, seconds = _resumed(
        ctx,
        path,
        entry,
        one,
        n,
        path.with_suffix(".worker1"),
        1,
        {"reshard": f"{world} -> 1"},
        ("--save-sharded", str(to_one), "--by-name"),
        said=(run.step.key, 0, 1, f"resuming the {world} ranks' shards on 1 rank, in a new process"),
    )
    resumed = [
        u | {"batch": u["batch"][: len(r["batch"])]}
        for u, r in zip(result["updates"], reference, strict=False)
    ]
    legs.append(_leg(world, 1, reference, resumed, ref_tensors, tensors, tol, seconds, result))
    saved = result.get("saved")
    if saved is None or not legs[-1]["ok"]:
        return legs
    ctx.emit(RecordUpdate(section="artifacts", value=saved | {"variant": run.step.variant}))
    # 1 → N: the checkpoint one process saved at k + n, resumed on the full world size.
    result, tensors, seconds = _resumed(
        ctx,
        Path(saved["path"]),
        saved,
        config,
        n,
        path.with_suffix(".workerN"),
        world,
        {"reshard": f"1 -> {world}"},
        said=(run.step.key, 0, 1, f"resuming that checkpoint on {world} ranks, in a new process group"),
    )
    legs.append(_leg(1, world, further, result["updates"], further_tensors, tensors, tol, seconds, result))
    return legs


def _leg(
    src: int,
    dst: int,
    reference: list[dict[str, Any]],
    resumed: list[dict[str, Any]],
    ref_tensors: dict[str, torch.Tensor],
    res_tensors: dict[str, torch.Tensor],
    tol: float,
    seconds: float,
    result: dict[str, Any],
) -> dict[str, Any]:
    cmp = compare(reference, resumed, ref_tensors, res_tensors, 0.0, 0.0, tol, draws=False)
    return {
        "from_ranks": src,
        "ranks": dst,
        "ok": cmp.ok,
        "reason": cmp.reason(),
        "comparison": f"within {tol:g} relative per tensor (another world size reduces in another order)",
        "max_loss_diff": cmp.checks["loss_per_step"].get("max_abs_diff", 0.0),
        "weights_max_rel_diff": cmp.checks["weights"].get("max_rel_diff"),
        "moments_max_rel_diff": cmp.checks["optimizer_moments"].get("max_rel_diff"),
        "checks": {name: c["ok"] for name, c in cmp.checks.items()},
        "first_difference": cmp.first,
        "note": result.get("note", ""),
        "seconds": round(seconds, 3),
    }
