"""`lr_run` on a captured trainer: one LR of the board through `args.learning_rate`, the
trainer's own `train()` for the declared budget, its own `evaluate()` every `validate_every`.

Every run starts where every other starts: the captured weights, a fresh optimizer and schedule,
the seed set before its data order is drawn; only the LR (and the seed named by the run) differ.
`phases/lr_run_row.py` plans the run and opens and closes its `[[runs]]` row, as for the pilot's loop.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import transformers
from transformers import TrainerCallback

from ....analysis.board import FIRST_BATCHES, best_validation, stop_cause
from ...checks.objective_checks import rng_untouched
from ...context import PhaseRun, RunContext
from . import loop
from .captured import adapter_of, from_start, trainer_of
from .probe import parameter_digest


class BoardProbe(TrainerCallback):
    """Per update: the logged loss, the declared stop causes, a validation every N updates."""

    def __init__(
        self, ctx: RunContext, run: PhaseRun, row: dict[str, Any], live: Any, board: Any, metric: str
    ) -> None:
        self.ctx, self.run, self.row, self.live, self.board = ctx, run, row, live, board
        self.metric = metric
        self.initial = math.nan
        self.best, self.since_best = math.inf, 0
        self.loss = math.nan

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.board.validate_every == 0 or step == self.board.updates:
            control.should_evaluate = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return control
        step, loss = state.global_step, float(logs["loss"])
        self.loss = loss
        self.row["losses"].append(loss)
        self.row["updates_done"] = step
        if step == 1:
            self.initial = self.row["initial_loss"] = loss
        cause = stop_cause(loss, self.initial, self.board.stop)
        if cause:
            self.row |= {"status": "diverged", "stop_cause": cause, "stop_step": step}
            self.row["reason"] = f"diverged at update {step}: " + (
                f"loss {loss} is not finite"
                if cause == "non_finite"
                else f"loss {loss:.4g} > {self.board.stop.explosion_factor:g} × initial {self.initial:.4g}"
            )
            control.should_training_stop = True
            control.should_evaluate = False
        self.live.send(step, loss)
        self.ctx.progress(self.run.step.key, step, self.board.updates, loss if math.isfinite(loss) else None)
        self.ctx.check_cancel()
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.metric not in (metrics or {}):
            return control  # another eval set of a dict: evaluated by the trainer, not the board's
        value = float(metrics[self.metric])
        step = state.global_step
        self.row["validation"].append({"update": step, "loss": value})
        self.live.send(step, self.loss, value)
        if value < self.best:
            self.best, self.since_best = value, 0
        else:
            self.since_best += 1
        plateau = self.board.stop.plateau_validations
        if (
            plateau
            and self.since_best >= plateau
            and step < self.board.updates
            and self.row["status"] == "running"
        ):
            self.row |= {"status": "stopped", "stop_cause": "plateau", "stop_step": step}
            self.row["reason"] = f"stopped at update {step}: {self.since_best} validations without improving"
            control.should_training_stop = True
        return control


def validation_metric(trainer: Any, evals: dict[str, Any]) -> tuple[str, str]:
    """(the metric an LR run validates on, why). One eval set: `eval_loss`. A dict of them: the
    set the trainer's `metric_for_best_model` names (`eval_b_loss`: what the user already said
    picks their best model), else the first set."""
    if len(evals) <= 1:
        return "eval_loss", "the trainer's eval_dataset"
    declared = str(getattr(trainer.args, "metric_for_best_model", None) or "")
    declared = declared if declared.startswith("eval_") else f"eval_{declared}"
    for split in evals:
        if declared == f"{split}_loss":
            return declared, f"{split}, named by metric_for_best_model"
    first = next(iter(evals))
    return f"{first}_loss", f"{first}, the first of the eval_dataset dict (metric_for_best_model names none)"


def first_batches_sha256(trainer: Any, updates: int) -> str:
    """Hash of the input ids of the first updates the trainer's dataloader yields at this seed."""
    h = hashlib.sha256()
    want = updates * max(1, int(trainer.args.gradient_accumulation_steps))
    for i, batch in enumerate(trainer.get_train_dataloader()):
        if i >= want:
            break
        h.update(batch["input_ids"].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def lr_run(ctx: RunContext, run: PhaseRun, plan: Any, row: dict[str, Any], live: Any) -> None:
    """The run through the trainer's own `train()` and `evaluate()`, filling `row` as it goes."""
    cfg, board = plan.config, plan.board
    trainer = trainer_of(ctx)
    row["trainer"] = "the script's own train() with args.learning_rate set; its own evaluate()"
    a = trainer.args
    saved = (a.learning_rate, a.seed)
    metric, why = validation_metric(trainer, adapter_of(ctx).evals())
    row["validation_metric"] = metric
    row["validation_set"] = why
    try:
        if trainer.eval_dataset is None:
            raise ValueError(
                "the script gives the trainer no eval_dataset: an LR run has nothing to validate on"
            )
        from_start(ctx)
        # The script's own seed: the RNG as the capture left it (every phase starts from it, the
        # fence puts it back) is the real run's, its data order and dropout included. Another
        # seed is a run of its own, seeded as the script's set_seed would; the fence undoes it.
        own = plan.seed == saved[1]
        row["seed_source"] = (
            "the script's own seed" if own else f"seeded {plan.seed} (the script's is {saved[1]})"
        )
        a.learning_rate, a.seed = plan.lr, plan.seed
        if not own:
            transformers.set_seed(plan.seed)  # dropout draws the same at every LR of this seed
        row["initial_weights_sha256"] = parameter_digest(loop.unwrapped(trainer))
        # Read beside the run, never in it: a loader's iterator and an evaluation draw from the
        # global RNG, which train() must find as the real run does.
        with rng_untouched([trainer.args.device]):
            row["first_batches_sha256"] = first_batches_sha256(trainer, min(FIRST_BATCHES, board.updates))
            # Update 0: the shared starting point, identical for every LR at this seed.
            start = float(trainer.evaluate().get(metric, math.nan))
        row["validation"].append({"update": 0, "loss": start})
        probe = BoardProbe(ctx, run, row, live, board, metric)
        probe.best = start
        with loop.batch_settings(trainer, cfg.microbatch, cfg.accumulation, cfg.activation_checkpointing):
            trainer.add_callback(probe)
            try:
                a.max_steps = board.updates
                trainer.train()
            finally:
                trainer.remove_callback(probe)
    finally:
        a.learning_rate, a.seed = saved
    points = row["validation"]
    if points[-1]["update"] != row["updates_done"]:
        # The final point of a run stopped between validations.
        value = float(trainer.evaluate().get(metric, math.nan))
        points.append({"update": row["updates_done"], "loss": value})
    if row["status"] == "running":
        row["status"] = "completed"
        row["reason"] = f"completed {board.updates} updates"
    row["final_loss"] = row["losses"][-1] if row["losses"] else math.nan
    row["final_validation"] = points[-1]["loss"]
    best = best_validation(points)
    if best is not None:
        row["best_validation"], row["best_validation_update"] = best
    row["reason"] += f"; final validation {row['final_validation']:.4g}"
