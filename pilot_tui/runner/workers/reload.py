"""The final reload, in a *fresh process* (R16, R17).

`python -m pilot_tui.runner.workers.reload --spec CAMPAIGN --spec-sha256 H --artifact FILE
--sha256 H --size N --out DIR`

Builds the task's model from scratch, loads the exported safetensors only after checking them
against the sha256 the record holds, replays the campaign's replay inputs and writes the outputs.
"""

from __future__ import annotations

import argparse

from ..loop.replay import replay_inputs
from ..loop.serving_check import generation
from ..processes.fresh_process import (
    fresh_process_context,
    fresh_process_parser,
    run_fresh_process,
    write_result,
)
from ..safe_load import load_tensors


def _parser() -> argparse.ArgumentParser:
    return fresh_process_parser("pilot_tui.runner.workers.reload", "--artifact", "artifact")


def reload(args: argparse.Namespace) -> None:
    ctx = fresh_process_context(args)
    provenance = {"path": str(args.artifact), "sha256": args.sha256, "size": args.size}
    tensors = load_tensors(args.artifact, provenance)
    model = ctx.task.build_model()
    if ctx.task.load_export is not None:
        # e.g. a LoRA adapter applied to the base model the task builds from its directory.
        ctx.task.load_export(model, tensors)
    else:
        # strict: every exported tensor must find its place and every weight must be in the file.
        model.load_state_dict(tensors, strict=True)
    model.to(ctx.device)
    outputs = replay_inputs(ctx.task, model, ctx.spec.replay.inputs, ctx.max_length, ctx.device)
    # As it will be served: the reloaded model, batched against one prompt at a time.
    served = generation(ctx.task, model, list(ctx.spec.replay.inputs), ctx.max_length, ctx.device)
    write_result(
        args.out,
        {
            "tensors_loaded": len(tensors),
            "serving": served,
            "replays": [
                {"input": o.input, "output": o.output, "ids": o.ids, "how": o.how, "error": o.error}
                for o in outputs
            ],
        },
        {f"logits/{i}": o.logits for i, o in enumerate(outputs) if o.logits is not None},
    )


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: reload(args))


if __name__ == "__main__":
    raise SystemExit(main())
