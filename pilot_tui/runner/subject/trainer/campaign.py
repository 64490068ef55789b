"""Open a trainer campaign: capture the script, change its arguments, wrap it as the task."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import transformers

from ....core.events import Opening, WireMessage
from ....core.hashing import sha256_file
from ....core.spec import LoadedSpec, VariantSpec, load_spec
from ....tasks.loader import TaskError
from ...context import RunContext
from ...distributed import state as dist_state
from ...distributed.launcher import resolve_world
from ...memory.probes import _vm_hwm_bytes
from .adapter import adapt
from .capture import CaptureError, capture, module_file
from .captured import INITIAL
from .estimate import trainer_optimizer
from .loop import checkpointing, snapshot, unwrapped
from .ranks import check_ranks_agree
from .settings import apply_pilot_settings
from .training import TrainerTraining

OUTPUT_DIR = "trainer-output"
USE_CPU = "ACCELERATE_USE_CPU"


def capture_for(loaded: LoadedSpec) -> Any:
    """The campaign's program captured as the user would run it — `python SCRIPT ARGS...`, a
    console command, `python -m MODULE ARGS...` — in the campaign file's folder, `task.env` set."""
    t = loaded.spec.task
    try:
        return capture(
            loaded.program_path(), t.args, cwd=loaded.path.parent, env=t.env, module=t.trainer_module
        )
    except CaptureError as exc:
        raise TaskError(str(exc)) from None


def program_file(loaded: LoadedSpec) -> Path:
    """The file the campaign's program runs: its fresh processes refuse one edited since."""
    module = loaded.spec.task.trainer_module
    if module:
        try:
            return module_file(module)
        except CaptureError as exc:
            raise TaskError(str(exc)) from None
    found = loaded.program_path()
    if found is None:
        raise TaskError(
            f"{loaded.path}: task.trainer_script: no such file {loaded.spec.task.trainer_script!r}"
        )
    return found


def fresh_capture_spec(loaded: LoadedSpec, variant: VariantSpec) -> LoadedSpec:
    """The campaign as a variant's fresh capture runs it: `task.args` followed by the variant's
    (argparse and HfArgumentParser keep a flag's last occurrence), `task.env` under the variant's
    env; the variant keeps only what it changes in place (microbatch, …) on that capture."""
    t, spec = loaded.spec.task, loaded.spec
    task = dataclasses.replace(t, args=[*t.args, *variant.args], env=t.env | variant.env)
    own = dataclasses.replace(variant, args=[], env={})
    variants = [own if v.id == variant.id else v for v in spec.variants]
    return dataclasses.replace(loaded, spec=dataclasses.replace(spec, task=task, variants=variants))


def load_checked(args: argparse.Namespace) -> LoadedSpec:
    """A worker's campaign (`worker_args`), refused when the file or the script changed since the
    runner read them.

    The runner's thread count comes first: CPU reductions split by thread, so the same split gives
    the same bits (resume) and comparable step times (variants)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_spec(args.spec)
    if loaded.sha256 != args.spec_sha256:
        raise ValueError(f"{args.spec}: the campaign file changed since the runner read it")
    script = program_file(loaded)
    if sha256_file(script) != args.script_sha256:
        raise ValueError(
            f"{script}: the training script changed since the runner captured it; rerun the campaign"
        )
    return loaded


def precision_of(args: Any) -> str:
    """The precision the trainer's accelerator runs: its flags, else accelerate's environment
    (`ACCELERATE_MIXED_PRECISION`), which `TrainingArguments` reads into `mixed_precision`."""
    if args.bf16 or args.fp16:
        return "bf16" if args.bf16 else "fp16"
    mixed = str(getattr(args, "mixed_precision", "no") or "no")
    return mixed if mixed in ("bf16", "fp16") else "fp32"


def versions() -> dict[str, str]:
    out = {"transformers": transformers.__version__, "torch": torch.__version__}
    for name in ("trl", "accelerate", "datasets", "peft"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # not installed: nothing to report
            continue
    return out


def cpu_ranks_env() -> list[str]:
    """On a rank of a gloo (CPU) group, what the trainer needs to run as one of the ranks.

    Without CUDA the trainer's accelerate state takes a torchrun launch as a distributed run only
    when told it is a CPU run (`--use_cpu`, or `accelerate launch --cpu`, which sets this
    variable); otherwise every rank trains alone. Set before the capture, said in the load row."""
    if not dist_state.active() or dist.get_backend() != "gloo" or os.environ.get(USE_CPU):
        return []
    os.environ[USE_CPU] = "true"
    return [
        f"environment {USE_CPU}: unset -> 'true' (a CPU rank joins its gloo group as accelerate launch --cpu does)"
    ]


def trainer_batch(loaded: LoadedSpec, trainer: Any, train_examples: int, longest: int = 0) -> LoadedSpec:
    """The spec's batch section as the trainer's own figures (the accounting and rows show them)."""
    a = trainer.args
    micro, acc = int(a.per_device_train_batch_size), int(a.gradient_accumulation_steps)
    # Under [distributed] each update takes microbatch × accumulation rows on every rank.
    world = max(1, loaded.spec.batch.replicas)
    per_epoch = max(1, math.ceil(train_examples / max(1, micro * acc * world)))
    by_steps = bool(a.max_steps and a.max_steps > 0)
    updates = a.max_steps if by_steps else math.ceil(per_epoch * float(a.num_train_epochs))
    # Run by epochs, the trainer derives its updates from the batch (a variant's too): the
    # epochs are what the run holds. A fraction of an epoch is held as its count of updates.
    epochs = float(a.num_train_epochs)
    by_epochs = not by_steps and epochs >= 1 and epochs == int(epochs)
    batch = dataclasses.replace(
        loaded.spec.batch,
        microbatch=micro,
        accumulation=acc,
        # The rows arrive tokenised (and cut) by the script: the longest one is the max length.
        max_length=longest,
        updates=max(1, int(updates)),
        hold="epochs" if by_epochs else "updates",
        epochs=int(epochs) if by_epochs else loaded.spec.batch.epochs,
        precision=precision_of(a),
        activation_checkpointing=checkpointing(a),
        drop_last=bool(a.dataloader_drop_last),
        num_workers=int(a.dataloader_num_workers),
    )
    # The trainer's optimizer as the estimate builds it (estimate.py says where it differs), with
    # its weight decay and clipping: `[optim]` is refused in a trainer campaign.
    optim = dataclasses.replace(
        loaded.spec.optim,
        name=trainer_optimizer(a)[0],
        lr=float(a.learning_rate),
        weight_decay=float(a.weight_decay),
        grad_clip=float(a.max_grad_norm or 0.0),
        seed=int(a.seed),
    )
    return dataclasses.replace(loaded, spec=dataclasses.replace(loaded.spec, batch=batch, optim=optim))


def open_trainer_campaign(
    loaded: LoadedSpec,
    emit: Callable[[WireMessage], None],
    work_dir: Path,
    cancel: threading.Event,
    heartbeat: Callable[[], None] = lambda: None,
) -> RunContext:
    """The script captured here. In the runner (one process: the data gates, the LR board, the
    resume) and, under `[distributed]`, on every rank of the torchrun group (the engine gates),
    where the trainer reads LOCAL_RANK / WORLD_SIZE itself and wraps its model in DDP."""
    launch_changes = cpu_ranks_env()
    rss_before = _vm_hwm_bytes()
    t = loaded.spec.task
    program = t.program if t.trainer_module else Path(t.program).name
    emit(Opening(stage=f"running {program} up to its trainer.train()"))
    cap = capture_for(loaded)
    rss_after = _vm_hwm_bytes()
    trainer = cap.trainer
    # The ranks share one output folder (rank 0 writes the model, each rank its RNG state); the
    # runner's own gates (the resume's run A) write beside it, never into it.
    output = OUTPUT_DIR + ("-ranks" if dist_state.active() else "")
    changes = launch_changes + apply_pilot_settings(trainer, work_dir / output)
    try:
        adapter = adapt(trainer)
    except ValueError as exc:
        raise TaskError(f"{cap.script}: {exc}") from None
    device = torch.device(trainer.args.device)
    loaded = trainer_batch(resolve_world(loaded, device), trainer, len(adapter.train), adapter.longest())
    ctx = RunContext(
        loaded,
        adapter.task,
        device,
        emit,
        work_dir,
        cancel,
        heartbeat=heartbeat,
        training=TrainerTraining(adapter),
    )
    ctx.memo[INITIAL] = snapshot(unwrapped(trainer))
    check_ranks_agree(ctx)  # a collective on every rank of a group; nothing in one process
    ctx.memo["trainer_capture"] = {
        "script": str(cap.script),
        "program": loaded.spec.task.program,
        "script_sha256": sha256_file(cap.script),
        "argv": cap.argv,
        "seconds": cap.seconds,
        "rss_mb": round((rss_after or 0) / 2**20, 1),
        "rss_before_mb": round((rss_before or 0) / 2**20, 1),
        "changes": changes,
        "train_kwargs": {k: v for k, v in cap.train_kwargs.items() if v is not None},
        "versions": versions(),
    }
    ctx.memo["task_sha256"] = ""
    return ctx
