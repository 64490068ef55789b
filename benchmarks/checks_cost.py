"""What each data and model check costs, on the demo and at 100 000 examples of the demo's size.

    .venv/bin/python benchmarks/checks_cost.py [N]

The whole-dataset scans (`inspect`'s scan and checks, `split`'s collate-and-hash of what the
model sees and its leakage checks, the period order) are timed on the demo's datasets (the
instruction demo, 462 examples at its default size in demo.toml; the classification demo, 480)
and on the same generators grown to N examples (default 100 000): the examples have the demo's
size and shape, only their number changes. The per-model checks (the output-size probe, the
gradient-less parameters, finiteness) are timed on the demo's models. Each figure is the best of
three runs in CPU seconds of this process (on a shared machine the wall time adds the waits
for a core); the target for a scan is under a second at 100 000 examples. One torch thread, as the
runner leaves a core to the view.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pilot_tui.analysis.leakage import check_splits
from pilot_tui.analysis.splits import group_split, period_key
from pilot_tui.runner.checks import finiteness, objective
from pilot_tui.runner.checks.inspection import batches, inspect_task, model_output, seen_digests
from pilot_tui.runner.loop import objective_gate
from pilot_tui.runner.loop.training import TrainConfig, build_state, train_update
from pilot_tui.runner.subject.task.updates import gradless
from pilot_tui.tasks import demo_classify, demo_instruct
from pilot_tui.tasks.contract import Task

RATIOS = {"train": 0.8, "validation": 0.1, "test": 0.1}


# "wall" or "cpu": CPU time of this process is what the check costs; on a machine shared with
# other work the wall time adds the waits for a core (the script prints both, then the CPU table).
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["cpu"]


def best(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return min(times)


def scans(task: Task) -> dict[str, float]:
    """Seconds per whole-dataset scan of `task`."""
    splits = group_split(task.examples, task.group_key, RATIOS, 0)
    ml = task.default_max_length
    first = task.collate([task.examples[i] for i in splits["train"][:4]], ml)
    output = model_output(task, first, torch.device("cpu"))
    seen = seen_digests(task, ml)
    everything = list(range(len(task.examples)))
    return {
        "the task's own collate over the dataset (the floor)": best(
            lambda: list(batches(task, everything, ml))
        ),
        "inspect: scan + checks + hash of the model input": best(
            lambda: inspect_task(
                task,
                max_length=ml,
                supervise_prompt=False,
                declared_names=[],
                show=4,
                microbatch=4,
                splits=splits,
                output=output,
                digests=[],
            )
        ),
        "split: leakage checks (hashes from inspect)": best(
            lambda: check_splits(task.examples, splits, group_key=task.group_key, seen=seen)
        ),
        "split without inspect: collate + hash": best(lambda: seen_digests(task, ml)),
    }


def periods(n: int) -> float:
    values = [f"{2000 + k // 12 % 50}-{1 + k % 12}" for k in range(n)]
    return best(lambda: sorted(set(values), key=period_key(values)))


def per_model(task: Task) -> dict[str, float]:
    splits = group_split(task.examples, task.group_key, RATIOS, 0)
    batch = task.collate([task.examples[i] for i in splits["train"][:4]], task.default_max_length)
    model = task.build_model()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return {
        "output size probe (one meta forward)": best(lambda: model_output(task, batch, torch.device("cpu"))),
        "gradient-less parameters (first_step)": best(lambda: gradless(model)),
        "finiteness of the weights (save/export)": best(lambda: finiteness.non_finite(model.state_dict())),
    }


def first_step_checks(task: Task, microbatch: int = 4, accumulation: int = 4) -> dict[str, float]:
    """The R26 checks of `first_step` beside the update they guard, measured side by side on the
    same state: the accumulation regrouping, the reference loss, one optimizer update."""
    splits = group_split(task.examples, task.group_key, RATIOS, 0)
    config = TrainConfig(
        variant="control",
        microbatch=microbatch,
        accumulation=accumulation,
        replicas=1,
        max_length=task.default_max_length,
        precision="fp32",
        activation_checkpointing=False,
        lr=1e-3,
        seed=0,
        total_updates=1000,
    )
    state = build_state(
        task,
        config,
        splits["train"],
        torch.device("cpu"),
        weight_decay=0.0,
        warmup=0,
        schedule="constant",
        drop_last=True,
        data_seed=0,
    )
    cpu = torch.device("cpu")
    micro = state.sampler.next_update()
    train_update(state, task, cpu, 1.0, micro)  # optimizer state allocated: a steady update from here
    return {
        "one update (m 4 x a 4, AdamW step)": best(lambda: train_update(state, task, cpu, 1.0, micro)),
        "accumulation check (m 4 x a 4 vs 1 x 16)": best(
            lambda: objective_gate.accumulation(state, task, micro, cpu)
        ),
        "reference loss (one microbatch forward)": best(
            lambda: objective_gate.reference(state, dataclasses.replace(task, loss=_ce_sum(task)), micro, cpu)
        ),
    }


def hf_task() -> Task | None:
    """The tiny Llama of the HF tests (tests/hf/build.py: 2 layers, hidden 32, a BPE tokenizer
    trained on the chat rows), on its 48 chats: the check on a transformers model."""
    try:
        import tempfile

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))
        import build  # type: ignore[import-not-found]

        from pilot_tui.tasks import hf_causal_lm
    except ImportError:
        return None
    root = Path(tempfile.mkdtemp(prefix="checks-cost-hf-"))
    rows = build.chat_rows()
    data = build.write_jsonl(root / "chat.jsonl", rows)
    model = build.causal_lm(
        root / "llama", build.chat_texts(rows), tied=True, template=build.PLAIN_TEMPLATE, pad="</s>"
    )
    return hf_causal_lm.make_task(str(model), str(data))


def _ce_sum(task: Task):
    """The demo's cross-entropy written as a task loss, so the reference check has one to compare."""

    def loss(logits, batch):
        flat, labels = objective.targets(task, logits, batch)
        return torch.nn.functional.cross_entropy(flat.float(), labels, reduction="sum"), (
            labels != -100
        ).sum()

    return loss


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    torch.set_num_threads(1)
    # The runner imports torch._dynamo before any phase (runner/main.py); so does this script, or
    # the first meta forward would pay for that import.
    importlib.import_module("torch._dynamo")

    demo_lm = demo_instruct.make_task()
    per_conversation = len(demo_lm.examples) / 240
    big_lm = demo_instruct.make_task(n_conversations=round(n / per_conversation), max_word=10)
    demo_cls = demo_classify.make_task()
    big_cls = demo_classify.make_task(n_sources=n // 4)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread; best of 3; CPU seconds of this "
        f"process (load average {load:.1f} on {os.cpu_count()} cores)"
    )
    rows = []
    for kind, small, big in (("causal LM", demo_lm, big_lm), ("classification", demo_cls, big_cls)):
        a, b = scans(small), scans(big)
        for name in a:
            rows.append((f"{kind}: {name}", len(small.examples), a[name], len(big.examples), b[name]))
    rows.append(("period order (splitter and check)", 462, periods(462), n, periods(n)))
    width = max(len(r[0]) for r in rows)
    print(f"{'whole-dataset scan':<{width}}  {'demo':>16}  {'grown':>18}  {'per 1k ex.':>10}")
    # The floor is the user's collate: a scan cannot be cheaper than collating the dataset once.
    for name, n_small, t_small, n_big, t_big in rows:
        mark = "" if "floor" in name else ("ok" if t_big < 1.0 else "over 1 s")
        print(
            f"{name:<{width}}  {t_small:8.4f} s ({n_small:>5})  {t_big:8.3f} s ({n_big:>6})  "
            f"{1000 * t_big / n_big:8.4f} s  {mark}"
        )
    print()
    for kind, task in (("causal LM", demo_lm), ("classification", demo_cls)):
        for name, seconds in per_model(task).items():
            print(f"{kind}: {name:<45} {1000 * seconds:8.2f} ms")
    print()
    for kind, task in (("causal LM", demo_lm), ("HF tiny Llama", hf_task())):
        if task is None:
            print(f"{kind}: transformers is not installed")
            continue
        costs = first_step_checks(task)
        update = costs["one update (m 4 x a 4, AdamW step)"]
        for name, seconds in costs.items():
            print(f"{kind}: {name:<45} {1000 * seconds:8.2f} ms  {seconds / update:5.2f} x one update")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
