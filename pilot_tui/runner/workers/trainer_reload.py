"""The new process of a trainer campaign's `final`: `python -m pilot_tui.runner.workers.trainer_reload`.

It loads the exported folder with `from_pretrained` (nothing inherited from the runner but the
command line: no trainer, no in-memory weights) and writes its logits on the runner's row, its
greedy replies to the replayed inputs and what a server finds in the folder alone (tokenizer,
generation config, cache, weights) — `result.json` + safetensors, through fresh_process.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..processes.fresh_process import run_fresh_process, write_result
from ..processes.lifetime import die_with_parent
from ..safe_load import load_tensors
from ..subject.trainer.replay import reload_export, served_alone, view


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pilot_tui.runner.workers.trainer_reload")
    p.add_argument("--export", type=Path, required=True)
    p.add_argument("--adapter-only", action="store_true")
    p.add_argument("--model-class", default="")
    p.add_argument("--inputs", type=Path, required=True, help="JSON: prompts, stops, the row's tensors file")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    return p


def reload(args: argparse.Namespace) -> None:
    die_with_parent()
    if args.threads:
        torch.set_num_threads(args.threads)  # the same CPU reduction split as the runner's
    request = json.loads(args.inputs.read_text())
    batch = load_tensors(request["batch"]["path"], request["batch"])
    model = reload_export(args.export, args.adapter_only, args.model_class)
    logits, replies = view(model, batch, request["prompts"], set(request["stops"]))
    served = served_alone(args.export, model, args.adapter_only, request["stops"])
    write_result(
        args.out, {"replies": replies, "model": type(model).__name__, "served": served}, {"logits": logits}
    )


def main() -> int:
    args = _parser().parse_args()
    return run_fresh_process(lambda: reload(args))


if __name__ == "__main__":
    sys.exit(main())
