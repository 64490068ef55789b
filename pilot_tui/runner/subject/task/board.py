"""One LR run of the board on the pilot's own loop: a fresh state from the campaign's
configuration with the run's LR and seed, the validation split in fixed batches, and the final
predictions on the replay inputs (`phases/lr_run_row.py` plans the run and closes its row)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

import torch

from ....analysis.board import FIRST_BATCHES, best_validation, stop_cause
from ....core.atomic import write_text_atomic
from ....core.events import RecordUpdate
from ....core.hashing import artifact_entry
from ....core.reasons import exception_line
from ....tasks.contract import CAUSAL_LM, Batch
from ...checks import objective
from ...context import PhaseRun, RunContext
from ...loop.training import TrainState, autocast, collate, train_update


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


def train(ctx: RunContext, run: PhaseRun, plan: Any, row: dict[str, Any], live: Any) -> TrainState:
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


def keep_predictions(ctx: RunContext, state: TrainState, row: dict[str, Any], run_id: str) -> None:
    """The run's final predictions on the replay inputs, kept as an artifact beside its row."""
    try:
        row["predictions"] = predictions(ctx, state, run_id)
    except Exception as exc:  # the run itself is measured: keep it, say what is missing
        row["predictions_error"] = exception_line(exc)
    if row.get("predictions"):
        ctx.emit(
            RecordUpdate(
                section="artifacts",
                value=row["predictions"]
                | {"phase": "lr_run", "variant": run_id, "step": row["updates_done"]},
            )
        )
