"""`python -m pilot_tui.runner.memory.estimate REQUEST_JSON`: the estimate in a process of its own.

The view side (`pilot-tui estimate`) never imports torch: it starts this module, which prints
progress lines on stderr and the result as one JSON line on stdout. Bad input: one line on
stderr, exit 2. Running apart also keeps the fake process group and the trackers' patches out of
any other process.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from ....core.reasons import message_line

EXIT_BAD_INPUT = 2


def _progress(done: int, total: int, message: str) -> None:
    print(f"estimate {done}/{total}: {message}", file=sys.stderr, flush=True)


def _synthetic_task(loaded: Any, source: Any) -> Any:
    """A task for a Hugging Face campaign without loading its data or weights: the configurations
    only need the spec; the batches are synthetic sequences of the configured length."""
    spec = loaded.spec
    key = spec.task.group_key or "group"
    splits = ("train", "train", "train", "validation", "test")
    examples = [
        {key: f"g{i}", spec.split.field or "split": splits[i % len(splits)], "time": i} for i in range(20)
    ]
    return replace(source.task, examples=examples, group_key=key)


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Estimate a campaign file or a model directory as the request says."""
    # After main() silenced library warnings: one printed while torch or a task imports would
    # break the command's one-line error.
    import torch

    from ....core.spec import load_spec
    from ....tasks.loader import load_task
    from ...context import RunContext
    from .campaign import (
        HF_BUILTINS,
        Target,
        campaign_configs,
        estimate_configs,
        estimate_model_dir,
        source_for,
        target_of,
        with_batch_overrides,
    )

    batch = {k: request.get(k) for k in ("precision", "microbatch", "max_length")}
    flags = {k: request.get(k) for k in ("gpus", "strategy", "gpu_memory_gb")}
    if request.get("model"):
        gpus = int(flags["gpus"] or 1)
        target = Target(
            strategy=str(flags["strategy"] or ("none" if gpus == 1 else "ddp")),
            gpus=gpus,
            gpu_memory_gb=float(flags["gpu_memory_gb"] or 0),
            headroom=float(request.get("headroom") or 0.15),
        )
        return estimate_model_dir(Path(request["model"]), target, _progress, **batch)
    loaded = load_spec(request["campaign"])
    if loaded.spec.task.captures_trainer:
        # Its model exists only once the script has built it (weights loaded): not "before any load".
        raise ValueError(
            f"{loaded.path}: a trainer_script campaign is estimated by its own estimate phase "
            "(pilot-tui run), on the model its script builds; `pilot-tui estimate --model DIR` "
            "estimates a Hugging Face model from its config alone"
        )
    loaded = with_batch_overrides(loaded, **batch)
    target = target_of(loaded, **flags)
    if loaded.spec.task.builtin in HF_BUILTINS:
        # Not the task itself: it would read the data and refuse a directory without weights.
        from .campaign import hf_campaign_source

        task = _synthetic_task(loaded, hf_campaign_source(loaded))
    else:
        task = load_task(loaded)
    with tempfile.TemporaryDirectory(prefix="pilot-estimate-") as work:
        ctx = RunContext(loaded, task, torch.device("cpu"), emit=lambda _m: None, work_dir=Path(work))
        return estimate_configs(source_for(ctx), campaign_configs(ctx, target), target, _progress)


def main(argv: list[str] | None = None) -> int:
    # The errors told as bad input; .sources imports torch (see run).
    from ....core.spec import SpecError
    from ....tasks.loader import TaskError
    from .sources import ModelDirError

    args = sys.argv[1:] if argv is None else argv
    warnings.filterwarnings("ignore")  # library warnings must not break the one-line error
    try:
        request = json.loads(args[0])
        result = run(request)
    except (SpecError, TaskError, ModelDirError, ValueError) as exc:
        print(
            f"pilot-tui: error: {message_line(exc)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
