"""`lr_run`: one LR at one seed for the declared budget, from the same start as every other LR (R13, R14).

Every run of the board is built fresh from the campaign's own configuration with only the LR and
the seed changed: same architecture, same data and data order at that seed, same effective batch,
same budget, same validation batches. Anything that would change one of those is refused before
the run starts. The run's row in `[[runs]]` is sent once, when the run ends — completed, stopped,
diverged, failed or cancelled — and the record only ever appends it.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from ...analysis.board import best_validation, parse_run_name
from ...core import dimensions
from ...core.atomic import write_text_atomic
from ...core.events import RecordUpdate, RunUpdate
from ...core.hashing import artifact_entry
from ...core.phase_table import lr_run_name
from ...core.reasons import exception_line
from ...core.spec import LRBoardSpec, StopSpec
from ...core.verdict import CANCELLED_BY_USER, FAIL, PASS, WARN
from ...tasks.contract import CAUSAL_LM, Batch
from ..checks import objective
from ..context import Cancelled, RunContext
from ..loop.training import TrainConfig, TrainState, autocast, collate, train_update
from .base import Outcome, PhaseFailure, PhaseRun, phase

# Overrides an LR run accepts besides the dimensions that allow it (core/dimensions.py: lr,
# microbatch, accumulation, precision, activation checkpointing, max length). The session adds
# `attempt` and `retry_of` (it sees the record); `lr` and `seed` must agree with the run's name;
# the others may change only how the same effective batch is computed (and are checked).
RUN_OVERRIDES = frozenset({"attempt", "retry_of", "seed", "updates"})


def allowed_overrides() -> frozenset[str]:
    return RUN_OVERRIDES | dimensions.lr_run_overrides()


# The board redraws at most ~10 times a second; validations always go out.
UPDATE_PERIOD_S = 0.1
# Updates whose example indices make `first_batches_sha256` (the same-start evidence).
FIRST_BATCHES = 3

VERDICTS = {"completed": PASS, "stopped": WARN, "diverged": FAIL, "failed": FAIL, "cancelled": FAIL}


@dataclass(frozen=True)
class RunPlan:
    """What one LR run is, decided before it starts."""

    run_id: str
    base: str
    attempt: int
    retry_of: str
    lr: float
    seed: int
    config: TrainConfig
    board: LRBoardSpec


def _refuse(reason: str) -> PhaseFailure:
    return PhaseFailure(f"refused: {reason}", {"refused": True})


def plan_run(ctx: RunContext, run: PhaseRun) -> RunPlan:
    """Check the run is comparable with every other run of the board; PhaseFailure says why not."""
    board = ctx.spec.lr_board
    if board is None:
        raise _refuse("the campaign declares no [lr_board]")
    name, ov = run.step.variant, dict(run.overrides)
    try:
        lr, seed = parse_run_name(name)
    except ValueError as exc:
        raise _refuse(str(exc)) from None
    unknown = sorted(set(ov) - allowed_overrides())
    if unknown:
        raise _refuse(f"an LR run cannot change {', '.join(unknown)}")
    declared = [x for x in (board.control, *board.variants) if lr_run_name(x, seed) == name]
    if not declared:
        raise _refuse(
            f"lr {lr:g} is not declared in [lr_board] (control {board.control:g}, variants "
            f"{', '.join(f'{v:g}' for v in board.variants) or 'none'}); LRs are declared before the runs"
        )
    lr = declared[0]
    if "lr" in ov and lr_run_name(float(ov["lr"]), seed) != name:
        raise _refuse(f"override lr {ov['lr']} differs from the run's name {name}")
    if "seed" in ov and int(ov["seed"]) != seed:
        raise _refuse(f"override seed {ov['seed']} differs from the run's name {name}")
    if "updates" in ov and int(ov["updates"]) != board.updates:
        raise _refuse(f"budget {ov['updates']} updates differs from the declared {board.updates}")
    b = ctx.spec.batch
    control_effective = b.microbatch * b.accumulation * b.replicas
    cfg = ctx.config(name, {k: v for k, v in ov.items() if k not in ("attempt", "retry_of", "updates")})
    if cfg.effective_batch != control_effective:
        raise _refuse(
            f"effective batch {cfg.microbatch}×{cfg.accumulation}×{cfg.replicas} = {cfg.effective_batch} "
            f"differs from the campaign's {control_effective}"
        )
    if cfg.max_length != ctx.max_length:
        raise _refuse(f"max_length {cfg.max_length} changes the data (the campaign uses {ctx.max_length})")
    cfg = replace(cfg, lr=lr, seed=seed, total_updates=board.updates)
    attempt = max(1, int(ov.get("attempt", 1)))
    # Belt and braces: even without the session's count, this runner never reuses an id.
    used: set[str] = ctx.memo.setdefault("lr_run_ids", set())
    while f"{name}-{attempt}" in used:
        attempt += 1
    run_id = f"{name}-{attempt}"
    used.add(run_id)
    return RunPlan(run_id, name, attempt, str(ov.get("retry_of", "")), lr, seed, cfg, board)


def validation_batches(ctx: RunContext, max_length: int) -> list[Batch]:
    """The validation split in its fixed order, in batches sized by the campaign, not the run.

    Every run of the board sees exactly these batches, whatever microbatch a retry uses.
    """
    indices = ctx.splits["validation"]
    size = ctx.spec.phases.eval_microbatch or ctx.spec.batch.microbatch
    return [
        collate(ctx.task, [ctx.task.examples[i] for i in indices[j : j + size]], max_length, ctx.device)
        for j in range(0, len(indices), size)
    ]


@torch.no_grad()
def validate(ctx: RunContext, state: TrainState, batches: list[Batch]) -> float:
    """Mean loss per supervised target over the whole validation set (one sync, at the end)."""
    state.model.eval()
    total = torch.zeros((), device=ctx.device)
    # Counted on the device too: an int() per batch would sync the device once per batch.
    count = torch.zeros((), dtype=torch.long, device=ctx.device)
    for batch in batches:
        with autocast(ctx.device, state.config.precision):
            logits = objective.forward(ctx.task, state.model, batch)
            total += objective.loss_sum(ctx.task, logits, batch).float()
        count += objective.supervised_targets(ctx.task, batch)
    state.model.train()
    return float(total.double() / count.clamp(min=1))


def weights_sha256(model: torch.nn.Module) -> str:
    """Hash of every tensor of the state dict, in key order: equal hashes, equal starting weights."""
    h = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def first_batches_sha256(state: TrainState, updates: int) -> str:
    """Hash of the example indices of the first updates, read from a copy of the run's sampler.

    Flattened per update, so a retry that splits the same effective batch into other
    microbatches still shows the same examples per update.
    """
    sampler = copy.deepcopy(state.sampler)
    order = [[i for micro in sampler.next_update() for i in micro] for _ in range(updates)]
    return hashlib.sha256(json.dumps(order).encode()).hexdigest()


def stop_cause(loss: float, initial: float, stop: StopSpec) -> str:
    """The declared divergence cause this update's loss meets, or ""."""
    if not math.isfinite(loss):
        return "non_finite" if stop.non_finite else ""
    if math.isfinite(initial) and loss > stop.explosion_factor * initial:
        return "loss_explosion"
    return ""


@torch.no_grad()
def predictions(ctx: RunContext, state: TrainState, run_id: str) -> dict[str, Any] | None:
    """Final predictions on the campaign's replay inputs, saved as JSON; its record entry."""
    inputs, task = list(ctx.spec.replay.inputs), ctx.task
    if not inputs or task.encode_replay is None:
        return None
    examples = [task.encode_replay(text) for text in inputs]
    batch = collate(task, examples, state.config.max_length, ctx.device)
    state.model.eval()
    with autocast(ctx.device, state.config.precision):
        logits = objective.forward(task, state.model, batch)
    argmax = logits.argmax(-1).cpu()
    labels = batch["labels"].cpu()
    out: dict[str, Any] = {"run_id": run_id, "kind": task.kind, "inputs": inputs, "items": []}
    for i, text in enumerate(inputs):
        if task.kind == CAUSAL_LM:
            # Position t predicts token t + 1: compare with the labels shifted by one.
            length = int(batch["attention_mask"][i].sum()) if "attention_mask" in batch else labels.shape[1]
            pred, target = argmax[i, : length - 1], labels[i, 1:length]
            keep = target != task.ignore_index
            item = {
                "input": text,
                "argmax": argmax[i, :length].tolist(),
                "predicted": pred[keep].tolist(),
                "target": target[keep].tolist(),
                "exact": bool(torch.equal(pred[keep], target[keep])),
            }
            if task.decode_token is not None:
                item["predicted_text"] = "".join(task.decode_token(int(t)) for t in pred[keep])
                item["target_text"] = "".join(task.decode_token(int(t)) for t in target[keep])
        else:
            cls = int(argmax[i])
            item = {"input": text, "predicted": cls, "target": int(labels[i])}
            if task.class_names:
                item["predicted_name"] = task.class_names[cls] if cls < len(task.class_names) else ""
        out["items"].append(item)
    path = ctx.work_dir / "runs" / f"{run_id}-predictions.json"
    # One input per line: readable in a terminal, diffable between runs.
    head = json.dumps({k: v for k, v in out.items() if k != "items"})[:-1]
    items = ",\n".join(json.dumps(item) for item in out["items"])
    write_text_atomic(path, f'{head}, "items": [\n{items}\n]}}\n')
    return artifact_entry(path, "run_predictions", format="json")


def run_row(ctx: RunContext, run: PhaseRun, plan: RunPlan) -> dict[str, Any]:
    """A `[[runs]]` entry as it starts: declared budget, configuration, nothing trained yet. The
    pilot's own loop and the trainer adapter's both start from it."""
    cfg, board = plan.config, plan.board
    return {
        "id": plan.run_id,
        "step": run.step.key,
        "lr": plan.lr,
        "seed": plan.seed,
        "attempt": plan.attempt,
        "retry_of": plan.retry_of,
        "control": plan.lr == board.control,
        "status": "running",
        "stop_cause": "",
        "stop_step": 0,
        "reason": "",
        "spec_sha256": ctx.loaded.sha256,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "updates": board.updates,
        "updates_done": 0,
        "validate_every": board.validate_every,
        "microbatch": cfg.microbatch,
        "accumulation": cfg.accumulation,
        "effective_batch": cfg.effective_batch,
        "max_length": cfg.max_length,
        "precision": cfg.precision,
        "losses": [],
        "validation": [],
    }


class LiveRun:
    """Throttled RunUpdate events for the board: ≤ 10 a second, plus every validation."""

    def __init__(self, ctx: RunContext, run_id: str) -> None:
        self.ctx, self.run_id, self.last = ctx, run_id, 0.0

    def send(self, update: int, loss: float, validation: float | None = None, status: str = "running"):
        now = time.monotonic()
        if validation is None and status == "running" and now - self.last < UPDATE_PERIOD_S:
            return
        self.last = now
        self.ctx.emit(RunUpdate(self.run_id, update, loss, validation, status))


@phase("lr_run")
def lr_run(ctx: RunContext, run: PhaseRun) -> Outcome:
    plan = plan_run(ctx, run)  # a refusal ends here: fail row, no [[runs]] entry, no id used
    board = plan.board
    t0 = time.perf_counter()
    row = run_row(ctx, run, plan)
    live = LiveRun(ctx, plan.run_id)
    try:
        state = _train(ctx, run, plan, row, live)
    except BaseException as exc:
        # The run keeps its row whatever happened, then the phase row says why (R14).
        finish_failed_run(ctx, row, t0, live, exc)
        raise
    try:
        row["predictions"] = predictions(ctx, state, plan.run_id)
    except Exception as exc:  # the run itself is measured: keep it, say what is missing
        row["predictions_error"] = exception_line(exc)
    if row.get("predictions"):
        ctx.emit(
            RecordUpdate(
                section="artifacts",
                value=row["predictions"]
                | {"phase": "lr_run", "variant": plan.run_id, "step": row["updates_done"]},
            )
        )
    finish_run(ctx, row, t0, live)
    details = {
        k: row[k]
        for k in (
            "id",
            "status",
            "stop_cause",
            "stop_step",
            "updates_done",
            "initial_loss",
            "final_loss",
            "final_validation",
            "best_validation",
            "retry_of",
        )
        if k in row
    }
    return Outcome(
        VERDICTS[row["status"]],
        row["reason"],
        details,
        params={"lr": plan.lr, "seed": plan.seed, "total_updates": board.updates, "run_id": plan.run_id},
    )


def _train(ctx: RunContext, run: PhaseRun, plan: RunPlan, row: dict[str, Any], live: LiveRun) -> TrainState:
    """The run's loop; fills `row` as it goes so that a failure still leaves what was measured."""
    cfg, board = plan.config, plan.board
    stop = board.stop
    # A fresh state, never ctx.states["control"]: same seed, same initial weights, same data order.
    state = ctx.new_state(cfg)
    row["initial_weights_sha256"] = weights_sha256(state.model)
    row["first_batches_sha256"] = first_batches_sha256(state, min(FIRST_BATCHES, board.updates))
    val_batches = validation_batches(ctx, cfg.max_length)
    losses: list[float] = row["losses"]
    points: list[dict[str, Any]] = row["validation"]
    initial = math.nan

    def take_validation(update: int) -> float:
        value = validate(ctx, state, val_batches)
        points.append({"update": update, "loss": value})
        return value

    # Update 0: the shared starting point, identical for every LR at this seed.
    best, since_best = take_validation(0), 0
    for update in range(1, board.updates + 1):
        ctx.check_cancel()
        micro = state.sampler.next_update()
        run.current_input = {"microbatch": cfg.microbatch, "max_length": cfg.max_length, "update": update}
        stats = train_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip, micro)
        # One read per update: the stop causes are declared per update, so they need the value.
        loss = float(stats.loss)
        losses.append(loss)
        row["updates_done"] = update
        if update == 1:
            initial = loss
            row["initial_loss"] = loss
        cause = stop_cause(loss, initial, stop)
        value = None
        if cause:
            row |= {"status": "diverged", "stop_cause": cause, "stop_step": update}
            row["reason"] = f"diverged at update {update}: " + (
                f"loss {loss} is not finite"
                if cause == "non_finite"
                else f"loss {loss:.4g} > {stop.explosion_factor:g} × initial {initial:.4g}"
            )
        elif update % board.validate_every == 0 or update == board.updates:
            value = take_validation(update)
            if value < best:
                best, since_best = value, 0
            else:
                since_best += 1
            if stop.plateau_validations and since_best >= stop.plateau_validations and update < board.updates:
                row |= {"status": "stopped", "stop_cause": "plateau", "stop_step": update}
                row["reason"] = (
                    f"stopped at update {update}: {since_best} validations without improving on {best:.4g}"
                )
        live.send(update, loss, value)
        ctx.progress(run.step.key, update, board.updates, loss if math.isfinite(loss) else None)
        if row["status"] != "running":
            break
    if points[-1]["update"] != row["updates_done"]:
        take_validation(row["updates_done"])  # the final point of a run stopped between validations
    if row["status"] == "running":
        row["status"] = "completed"
        row["reason"] = f"completed {board.updates} updates"
    row["final_loss"] = losses[-1] if losses else math.nan
    row["final_validation"] = points[-1]["loss"]
    best = best_validation(points)
    if best is not None:
        row["best_validation"], row["best_validation_update"] = best
    row["reason"] += f"; final validation {row['final_validation']:.4g}"
    return state


def finish_failed_run(
    ctx: RunContext, row: dict[str, Any], t0: float, live: LiveRun, exc: BaseException
) -> None:
    """Close a run that a cancel or an error ended: its row says which, and why."""
    cancelled = isinstance(exc, Cancelled)
    row["status"] = "cancelled" if cancelled else "failed"
    row["reason"] = CANCELLED_BY_USER if cancelled else exception_line(exc)
    finish_run(ctx, row, t0, live)


def finish_run(ctx: RunContext, row: dict[str, Any], t0: float, live: LiveRun) -> None:
    """Close the run: its last live event, then its one `[[runs]]` row."""
    row["duration_s"] = round(time.perf_counter() - t0, 3)
    losses = row["losses"]
    live.send(row["updates_done"], losses[-1] if losses else math.nan, None, row["status"])
    ctx.emit(RecordUpdate(section="runs", value={k: v for k, v in row.items() if v is not None}))
