"""Trainer-campaign overhead: the pilot's steady phase on a captured Trainer against the same
script's plain `trainer.train()` for the same number of updates.

    python benchmarks/trainer_overhead.py [--script sft_chat.py] [--updates 20] [--rounds 8] [--hidden 128]

The script is one of tests/data/trainer_scripts (run unchanged, on tiny local assets built by its
`tiny_assets.py` with the given hidden size; nothing from a hub), given the args its README lists.

Pilot side: a `[task] trainer_script` campaign opened as the runner opens it (the script captured
at its first `train()`, the pilot's settings applied in place: logging every step, no reporting,
no saves or evaluation) and the runner's own `execute()` of the `steady` step: the trainer's
`train()` for 1 + N updates with the pilot's StepProbe callback, the MemoryProbe around the phase,
events serialised through the runner's channel, the live-counters thread, the row. Timed from
outside, the whole call divided by its 1 + N updates.

Plain side: the same script captured again, its trainer left as the script built it (its own
logging_steps, callbacks, report_to) except that nothing is saved or evaluated inside the timed
window (the pilot's steady phase does neither), its output goes to a temp folder and its progress
bar / printer callback is removed (the pilot removes them too; they would print over this table).
`args.max_steps = 1 + N`, then `trainer.train()`, timed from outside, divided by 1 + N.

All in this process (two more captures: the TrainingArguments each builds re-creates the same
single-process accelerate state). The arms' order rotates every round so drift and the machine's
other load hit each alike; a second plain trainer is the null arm, whose ratio to the first is the
noise floor here and now. Each round is timed on the wall clock and in process CPU time (all
threads: the pilot's counters thread counts against it); on a machine shared with other load the
CPU time is the steadier estimate of the work the pilot adds. Prints per-update medians and the
ratios (of the medians, the median of each round's own ratio, of the totals); the target is
pilot / plain ≤ 1.05.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "data" / "trainer_scripts"
sys.path.insert(0, str(REPO))

# The args each script's README line gives, `$T` the tiny assets' folder.
SCRIPT_ARGS = {
    "plain_trainer.py": [
        "--model",
        "$T/model",
        "--data",
        "$T/prompt_completion.jsonl",
        "--output_dir",
        "out",
    ],
    "sft_chat.py": ["--model_name_or_path", "$T/model", "--dataset", "$T/chat.jsonl", "--output_dir", "out"],
    "sft_packing.py": [
        "--model_name_or_path",
        "$T/model",
        "--dataset_path",
        "$T/prompt_completion.jsonl",
        "--output_dir",
        "out",
        "--max_length",
        "64",
        "--per_device_train_batch_size",
        "2",
        "--bf16",
        "false",
    ],
    "hf_argparser.py": [
        "--model_name_or_path",
        "$T/model",
        "--train_file",
        "$T/text.jsonl",
        "--output_dir",
        "out",
        "--do_train",
        "--block_size",
        "32",
    ],
}


def tiny_assets(folder: Path, hidden: int) -> Any:
    spec = importlib.util.spec_from_file_location("tiny_assets", SCRIPTS / "tiny_assets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_assets"] = module
    spec.loader.exec_module(module)
    with contextlib.redirect_stderr(io.StringIO()):  # its save progress bars
        return module.build(folder, hidden=hidden)


def campaign(folder: Path, script: str, args: list[str]) -> Path:
    import tomli_w

    path = folder / "campaign.toml"
    raw = {
        "campaign": {"name": "trainer-overhead"},
        "task": {"trainer_script": str(SCRIPTS / script), "args": args},
    }
    path.write_text(tomli_w.dumps(raw))
    return path


def plain_trainer(script: str, args: list[str], cwd: Path, out: Path) -> Any:
    """The script's trainer as it built it, minus saves, evaluation and printing in the window."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from transformers.trainer_utils import IntervalStrategy, SaveStrategy

    from pilot_tui.runner.subject.trainer.capture import capture

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer = capture(SCRIPTS / script, args, cwd=cwd).trainer
    a = trainer.args
    a.output_dir = str(out)
    a.save_strategy = SaveStrategy.NO
    a.eval_strategy = IntervalStrategy.NO
    a.eval_on_start = False
    a.load_best_model_at_end = False
    a.push_to_hub = False
    for cb in list(trainer.callback_handler.callbacks):
        if isinstance(cb, ProgressCallback | PrinterCallback):
            trainer.remove_callback(cb)
    return trainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default="sft_chat.py", choices=sorted(SCRIPT_ARGS))
    parser.add_argument(
        "--updates", type=int, default=20, help="timed updates per round (phases.steady_updates)"
    )
    parser.add_argument("--rounds", type=int, default=8, help="rounds per arm, interleaved")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size of the tiny Llama")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: as the runner picks)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    # pin_memory without an accelerator: said once per dataloader, on both sides alike.
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    warnings.filterwarnings("ignore", category=FutureWarning)  # v6 renames, said by either side

    import torch
    import transformers

    from pilot_tui.core.spec import load_spec
    from pilot_tui.core.steps import Step
    from pilot_tui.runner.main import Channel, _counters, leave_a_core_for_the_view
    from pilot_tui.runner.phases import execute
    from pilot_tui.runner.subject.trainer.campaign import open_trainer_campaign

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    else:
        leave_a_core_for_the_view()  # the runner's own choice

    scratch = Path(tempfile.mkdtemp(prefix="trainer-overhead-"))
    assets = tiny_assets(scratch / "tiny", args.hidden)
    script_args = [a.replace("$T", str(assets.root)) for a in SCRIPT_ARGS[args.script]]
    loaded = load_spec(campaign(scratch, args.script, script_args))
    steps = args.updates + 1  # the steady phase's untimed warm-up update, counted on both sides

    with open(os.devnull, "w") as sink:
        channel = Channel(sink)  # events serialised exactly as the runner sends them
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ctx = open_trainer_campaign(loaded, channel.emit, scratch / "work", threading.Event())
        stop = threading.Event()
        # As in the runner: the counters thread samples only while a phase is busy.
        holder = {"ctx": ctx, "busy": False}
        counters = threading.Thread(target=_counters, args=(channel, holder, stop), daemon=True)
        counters.start()
        plain = plain_trainer(args.script, script_args, scratch, scratch / "plain")
        null = plain_trainer(args.script, script_args, scratch, scratch / "null")
        steady = Step("steady", "steady")
        overrides = {"steady_updates": args.updates}

        def pilot_round() -> None:
            holder["busy"] = True
            row = execute(ctx, steady, overrides)
            holder["busy"] = False
            if row["verdict"] == "fail":
                raise SystemExit(f"the pilot's steady phase failed: {row['reason']}")

        def plain_round(trainer: Any) -> None:
            trainer.args.max_steps = steps
            trainer.train()

        arms = {
            "pilot": pilot_round,
            "plain": lambda: plain_round(plain),
            "null": lambda: plain_round(null),
        }
        wall: dict[str, list[float]] = {k: [] for k in arms}
        cpu: dict[str, list[float]] = {k: [] for k in arms}
        for fn in arms.values():
            fn()  # a warm-up round each: optimizer state allocated, allocator and caches settled
        names = list(arms)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:  # no arm always runs first
                t0, c0 = time.perf_counter(), time.process_time()
                arms[name]()
                wall[name].append((time.perf_counter() - t0) / steps)
                cpu[name].append((time.process_time() - c0) / steps)
        stop.set()
        counters.join()  # not left running into the interpreter's exit

    a = plain.args
    print(
        f"script {args.script} ({type(plain).__name__}) · tiny Llama hidden {args.hidden} · device {a.device} · "
        f"torch {torch.__version__} · transformers {transformers.__version__}"
    )
    print(
        f"microbatch {a.per_device_train_batch_size} × accumulation {a.gradient_accumulation_steps} · "
        f"the script's logging_steps {a.logging_steps} (the pilot: 1) · threads {torch.get_num_threads()}"
    )
    print(
        f"{args.rounds} rounds × {steps} updates per arm, order rotated every round · "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    verdict = {}
    for clock, times in (("wall", wall), ("cpu", cpu)):
        p, b, n = (statistics.median(times[k]) for k in ("pilot", "plain", "null"))
        # Paired within each round (the arms ran back to back): slow drift in the load cancels.
        paired = statistics.median(x / y for x, y in zip(times["pilot"], times["plain"], strict=True))
        paired_null = statistics.median(x / y for x, y in zip(times["null"], times["plain"], strict=True))
        what = "wall clock" if clock == "wall" else "process CPU time (all threads)"
        print(f" {what}, ms/update (median of rounds):")
        print(f"  pilot steady (execute + probes)  : {p * 1e3:8.3f}")
        print(f"  plain trainer.train()            : {b * 1e3:8.3f}")
        print(f"  plain again (null arm)           : {n * 1e3:8.3f}")
        print(
            f"  ratio pilot / plain              : {p / b:8.3f}   paired {paired:.3f} · totals "
            f"{sum(times['pilot']) / sum(times['plain']):.3f}"
        )
        print(f"  noise floor plain again / plain  : {n / b:8.3f}   paired {paired_null:.3f}")
        verdict[clock] = (p / b, n / b)
    for clock, (ratio, _) in verdict.items():
        print(f" target pilot / plain ≤ 1.05 ({clock}, medians): {'met' if ratio <= 1.05 else 'NOT met'}")
    floor = verdict["wall"][1]
    if abs(floor - 1) > 0.03:
        # Two identical trainers disagree: whatever the pilot ratio says, it is inside the noise.
        print(
            f" warning: the wall-clock noise floor is beyond ±3% (load average {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores): the CPU-time lines are the steadier estimate here; rerun quieter"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
