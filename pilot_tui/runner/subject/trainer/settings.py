"""What the pilot changes in a captured trainer's arguments, in place, and says it changed.

Never a new `TrainingArguments` (its `__post_init__` resets the accelerate state the captured
trainer holds): attributes read at `train()` time are set on `trainer.args`. Every change is
one line of the `load` row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.trainer_utils import IntervalStrategy, SaveStrategy

# Settings that make a resume test meaningless: refused by the resume gate, named.
RESUME_REFUSED = {
    "save_only_model": "a checkpoint without optimizer, scheduler and RNG state cannot resume exactly",
    "ignore_data_skip": "a resume that does not skip the data already seen trains on other batches",
}


def _set(args: Any, changes: list[str], key: str, value: Any, why: str = "") -> None:
    old = getattr(args, key)
    if old == value or (hasattr(old, "value") and old.value == value):
        return
    setattr(args, key, value)
    before, after = getattr(old, "value", old), getattr(value, "value", value)
    changes.append(f"{key}: {before!r} -> {after!r}" + (f" ({why})" if why else ""))


def integration_callbacks(trainer: Any) -> list[Any]:
    """The reporting integrations (wandb, tensorboard, mlflow…) the trainer was built with."""
    kinds = tuple(INTEGRATION_TO_CALLBACK.values())
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, kinds)]


def apply_pilot_settings(trainer: Any, output_dir: Path) -> list[str]:
    """Logging every step, no reporting, no evaluation or save unless the pilot asks, outputs in
    the record's folder, never a hub push. Returns the changes, one line each."""
    args, changes = trainer.args, []
    _set(args, changes, "output_dir", str(output_dir), "inside the record's folder")
    _set(args, changes, "logging_strategy", IntervalStrategy.STEPS)
    _set(args, changes, "logging_steps", 1, "the pilot reads every step's loss, grad norm and LR")
    _set(args, changes, "logging_first_step", False)
    _set(args, changes, "save_strategy", SaveStrategy.NO, "the pilot saves only where a gate asks")
    _set(args, changes, "eval_strategy", IntervalStrategy.NO, "eval_longest evaluates")
    _set(args, changes, "eval_on_start", False)
    _set(args, changes, "load_best_model_at_end", False)
    _set(args, changes, "push_to_hub", False, "never a hub push")
    _set(args, changes, "report_to", [], "no reporting integration")
    _set(args, changes, "disable_tqdm", True)
    changes.append(
        f"max_steps: {args.max_steps!r} -> set by each gate (first_step 1, steady the run's own length, "
        "timed until its precision; resume resume.k + resume.n)"
    )
    for cb in integration_callbacks(trainer):
        trainer.remove_callback(cb)
        changes.append(f"callback {type(cb).__name__} removed (reporting)")
    for cb in list(trainer.callback_handler.callbacks):
        if isinstance(cb, ProgressCallback | PrinterCallback):
            trainer.remove_callback(cb)
            changes.append(f"callback {type(cb).__name__} removed (the pilot reports progress)")
    return changes
