"""The trainer estimate against the trainer's own update, byte for byte, on the CPU.

    python benchmarks/trainer_estimate.py [--script lora_two_evals.py] [--hidden 32] [--checkpointing]

The script (one of tests/data/trainer_scripts, run unchanged on tiny local assets) is captured as
a trainer campaign captures it. Estimate: the `estimate` phase's fake run of the control on the
captured model rebuilt from its config (a peft model: the base plus the captured adapter config),
exact tensor bytes (no allocator rounding: the measured side has none on a CPU). Measured: the
trainer's own `train()` for 2 updates at the script's microbatch and accumulation, its rows
longest first (the estimate's shapes), tracked by the same PyTorch `MemTracker` the estimate
uses: every tensor the update creates, by category, and the peak of their sum. And the peak
alone, measured by torch's profiler over 3 updates with no tracker at all: the tracker keeps some
of a Hugging Face model's tensors alive from one update to the next, which no real run holds.

Prints each figure estimated / measured. On a GPU, `scripts/gpu_check_estimate.py RECORD.toml`
compares with the allocator's real peak instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from trainer_overhead import SCRIPT_ARGS, SCRIPTS, tiny_assets  # noqa: E402

ARGS = SCRIPT_ARGS | {
    "lora_two_evals.py": [
        "--model",
        "$T/model",
        "--data",
        "$T/prompt_completion.jsonl",
        "--output_dir",
        "out",
    ]
}
CATEGORIES = {"parameters": "PARAM", "gradients": "GRAD", "activations": "ACT"}


def measured_peak(trainer, microbatch: int, accumulation: int, checkpointing: bool) -> dict[str, int]:
    """The trainer's own 2 updates under MemTracker: {category: peak bytes, "Total": …}."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import TrainerCallback

    from pilot_tui.runner.memory.estimate.fake_run import _NoHook
    from pilot_tui.runner.subject.trainer.loop import batch_settings, unwrapped

    model = unwrapped(trainer)
    tracker = MemTracker()
    # As the estimate's tracker: a frozen (peft base) parameter takes no gradient hook.
    for p in model.parameters():
        if not p.requires_grad:
            tracker._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())
    tracker.track_external(model)

    class Reset(TrainerCallback):
        # The tracker refuses a second forward of the root module without this (its peak stays).
        def on_substep_end(self, *args, **kwargs):
            tracker.reset_mod_stats()

        def on_step_end(self, *args, **kwargs):
            tracker.reset_mod_stats()

    trainer.add_callback(Reset())
    trainer.args.max_steps = 2
    with batch_settings(trainer, microbatch, accumulation, checkpointing), tracker:
        trainer.train()
        peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    out = {str(getattr(k, "name", k)): int(v) for k, v in peak.items()}
    # The state the trainer's own optimizer holds after its updates (the peak may come before it).
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    out["optimizer_state"] = sum(
        t.untyped_storage().nbytes() for s in opt.state.values() for t in s.values() if torch.is_tensor(t)
    )
    return out


def profiled_peaks(trainer, microbatch: int, accumulation: int, checkpointing: bool) -> list[int]:
    """The trainer's own 3 updates with no tracker: the most bytes live during each, measured by
    torch's profiler (every CPU allocation and free) above the model's own weights and buffers."""
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import TrainerCallback

    from pilot_tui.runner.subject.trainer.loop import batch_settings, unwrapped

    model = unwrapped(trainer)
    resident = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    marks: list[record_function] = []

    class Mark(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            marks.append(record_function(f"update {len(marks)}"))
            marks[-1].__enter__()

        def on_step_end(self, *args, **kwargs):
            marks[-1].__exit__(None, None, None)

    callback = Mark()
    trainer.add_callback(callback)
    trainer.args.max_steps = 3
    try:
        with (
            batch_settings(trainer, microbatch, accumulation, checkpointing),
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        ):
            trainer.train()
    finally:
        trainer.remove_callback(callback)
    spans = sorted(
        (e.start_ns(), e.end_ns())
        for e in prof.profiler.kineto_results.events()
        if e.name().startswith("update ")
    )
    memory = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live, peaks = 0, [0] * len(spans)
    for at, nbytes in memory:
        live += nbytes
        for i, (start, end) in enumerate(spans):
            if start <= at <= end:
                peaks[i] = max(peaks[i], live)
    return [resident + p for p in peaks]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default="lora_two_evals.py", choices=sorted(ARGS))
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--checkpointing", action="store_true")
    opts = parser.parse_args()

    from pilot_tui.runner.memory.estimate.fake_run import FakeConfig, run_fake
    from pilot_tui.runner.subject.trainer.adapter import adapt
    from pilot_tui.runner.subject.trainer.capture import capture
    from pilot_tui.runner.subject.trainer.estimate import trainer_optimizer
    from pilot_tui.runner.subject.trainer.settings import apply_pilot_settings

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        assets = tiny_assets(work / "tiny", opts.hidden)
        args = [a.replace("$T", str(assets.root)) for a in ARGS[opts.script]]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            trainer = capture(SCRIPTS / opts.script, args, cwd=work).trainer
        apply_pilot_settings(trainer, work / "trainer-output")
        adapter = adapt(trainer)
        a = trainer.args
        micro, acc = a.per_device_train_batch_size, a.gradient_accumulation_steps
        cfg = FakeConfig(
            "control",
            micro,
            acc,
            adapter.longest(),
            "fp32",
            opts.checkpointing,
            grad_clip=float(a.max_grad_norm or 0.0),
            weight_decay=float(a.weight_decay),
            allocator_rounding=False,
            optimizer=trainer_optimizer(a)[0],
        )
        est = run_fake(adapter.estimate_source(), cfg)
        if not est.get("estimable"):
            print(f"not estimable: {est.get('reason')}")
            return 1
        # The measured run sees the longest rows first: the same shapes as the estimate's batches.
        order = sorted(range(len(adapter.train)), key=lambda i: -adapter.length("train", i))
        trainer.train_dataset = trainer.train_dataset.select(order)
        trainer._get_train_sampler = lambda *x, **k: __import__("torch").utils.data.SequentialSampler(
            trainer.train_dataset
        )
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            profiled = profiled_peaks(trainer, micro, acc, opts.checkpointing)
            real = measured_peak(trainer, micro, acc, opts.checkpointing)
    print(
        f"{opts.script}, hidden {opts.hidden}, microbatch {micro} × accumulation {acc}, length "
        f"{adapter.longest()}, checkpointing {opts.checkpointing}, optim {getattr(a.optim, 'value', a.optim)} as {cfg.optimizer}; "
        f"{est['trainable_parameters']:,} trainable parameters"
    )
    print(f"{'figure':18} {'estimate B':>12} {'measured B':>12} {'ratio':>7}")
    rows = [(name, est[f"{name}_bytes"], real.get(cat, 0)) for name, cat in CATEGORIES.items()]
    rows.append(("optimizer_state", est["optimizer_state_bytes"], real["optimizer_state"]))
    rows.append(("peak", est["peak_allocated_bytes"], real["Total"]))
    rows.append(("peak (profiler)", est["peak_allocated_bytes"], max(profiled)))
    for name, e, m in rows:
        ratio = f"{e / m:.3f}" if m else "-"
        print(f"{name:18} {e:>12,} {m:>12,} {ratio:>7}")
    print(
        f"(the profiler's peak per update, no tracker: {', '.join(f'{p:,}' for p in profiled)} B; the most of them compared)"
    )
    print(
        "(measured: parameters, gradients, activations as the tracker holds them at its peak; the "
        "optimizer state the trainer's optimizer holds after the updates)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
