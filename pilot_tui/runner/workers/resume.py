"""The resumed side of the resume check, in a *new process* (R15).

`python -m pilot_tui.runner.workers.resume --spec CAMPAIGN --spec-sha256 H --checkpoint CKPT
--sha256 H --size N --config JSON --updates n --out DIR`

Loads the campaign and the task from scratch, verifies the checkpoint against the sha256 the
runner recorded, loads it with `weights_only=True`, trains n more updates and writes what it
observed: step, LR and batch ids of every update, every loss, the final weights and optimizer
moments, and the next random draw.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..loop.checkpoint import load_training_state, restore_training_state, resume_from, save_training_state
from ..loop.resume_check import final_tensors, next_draws, observe_update
from ..loop.training import TrainConfig
from ..processes.determinism import deterministic
from ..processes.fresh_process import (
    fresh_process_context,
    fresh_process_parser,
    run_fresh_process,
    write_result,
)


def _parser() -> argparse.ArgumentParser:
    p = fresh_process_parser("pilot_tui.runner.workers.resume", "--checkpoint", "checkpoint")
    p.add_argument("--config", required=True, help="the TrainConfig of the checked run, as JSON")
    p.add_argument("--updates", type=int, required=True)
    p.add_argument("--files", type=int, default=None, help="a sharded checkpoint's recorded file count")
    p.add_argument(
        "--save-sharded", type=Path, default=None, help="after the updates, save a sharded checkpoint here"
    )
    p.add_argument("--by-name", action="store_true", help="optimizer tensors keyed by parameter name")
    return p


def resume(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    ctx = fresh_process_context(args)
    config = TrainConfig.from_params(json.loads(args.config))
    provenance = {"path": str(args.checkpoint), "sha256": args.sha256, "size": args.size, "files": args.files}
    if args.checkpoint.is_dir():  # sharded: read into this world size's shards (DCP reshards)
        state = ctx.new_state(config)
        saved = resume_from(state, args.checkpoint, provenance)
    else:
        saved = load_training_state(args.checkpoint, provenance)  # refused before anything is built
        state = ctx.new_state(config)
        restore_training_state(state, saved)
    # O(1): the sampler now stands at the saved (epoch, position); nothing consumed is replayed.
    resumed_at = state.sampler.state_dict()
    t1 = time.perf_counter()
    # The same deterministic kernels as the runner's uninterrupted run (runner/processes/determinism.py).
    with deterministic() as nondeterministic:
        steps = [
            observe_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip) for _ in range(args.updates)
        ]
    saved_entry = None
    if args.save_sharded is not None:  # the next leg of a resharding check starts from here
        from ...core.hashing import artifact_entry
        from ..distributed import state as dist_state

        figures = save_training_state(state, args.save_sharded, "sharded")
        if dist_state.is_rank0():
            saved_entry = artifact_entry(
                args.save_sharded,
                "resume_checkpoint",
                phase="resume",
                step=state.step,
                format="torch.distributed.checkpoint",
                world_size=dist_state.world(),
            ) | {"save_s": figures["save_s"]}
    python_draw, draws = next_draws(ctx.device)
    t2 = time.perf_counter()
    write_result(
        args.out,
        {
            "note": str(saved.get("note", "")),
            "saved": saved_entry,
            "resumed_at": resumed_at,
            "step_at_load": int(saved["step"]),
            "updates": steps,
            "python_draw": python_draw,
            "scaler": {k: float(v) for k, v in state.scaler.state_dict().items()},
            "nondeterministic_ops": nondeterministic,
            # Inside the process; the runner's figure adds the interpreter and torch import.
            "timings_s": {"setup_and_load": t1 - t0, "train": t2 - t1},
        },
        final_tensors(state, by_name=args.by_name) | draws,
    )


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: resume(args))


if __name__ == "__main__":
    raise SystemExit(main())
