"""What one update asks of torch: aten ops counted for the pilot's steady update and the bare loop.

    .venv/bin/python benchmarks/update_ops.py [--campaign campaigns/demo.toml] [--updates 3]
    .venv/bin/python benchmarks/update_ops.py --hf     # the built-in hf_causal_lm task

Both arms run the same batches (the same data position, the same seed) under a
`TorchDispatchMode` that counts every aten op they dispatch: the pilot's side is steady's own
feed and update (`host_feed`, `_update`), the bare side `benchmarks/overhead.py`'s loop. Prints
the ops whose counts differ, per update, and the totals. Counts, not times: they do not move with
the machine's load, so they say what the pilot adds where a timing cannot.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import threading
from pathlib import Path

from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import overhead  # noqa: E402

from pilot_tui.core.spec import load_spec  # noqa: E402
from pilot_tui.core.steps import Step  # noqa: E402
from pilot_tui.runner.context import RunContext, pick_device  # noqa: E402
from pilot_tui.runner.phases import execute  # noqa: E402
from pilot_tui.runner.phases.base import PhaseRun  # noqa: E402
from pilot_tui.runner.subject.task import updates as train_steps  # noqa: E402
from pilot_tui.runner.timing.steady import host_feed  # noqa: E402
from pilot_tui.tasks.loader import load_task  # noqa: E402


class OpCount(TorchDispatchMode):
    """Counts the aten ops dispatched inside the block, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", type=Path, default=REPO / "campaigns" / "demo.toml")
    parser.add_argument("--updates", type=int, default=3, help="updates counted per arm")
    parser.add_argument("--hf", action="store_true", help="the hf_causal_lm task on a tiny local Llama")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.hf:
        args.campaign = overhead.hf_campaign(Path(scratch.name))
    loaded = load_spec(args.campaign)
    task = load_task(loaded)
    device = pick_device(loaded.spec.batch.device)
    ctx = RunContext(loaded, task, device, lambda _: None, Path(scratch.name), threading.Event())
    config = ctx.config()
    bare = overhead.BareLoop(ctx, config)
    execute(ctx, Step("first_step", "first_step"), {})  # both arms past their first update
    bare.run(1)
    state = ctx.states["control"]
    bare.sampler.load_state_dict(state.sampler.state_dict())  # the same batches from here
    run = PhaseRun(step=Step("steady", "steady"), overrides={})
    feed = host_feed(ctx, state)
    pilot = OpCount()
    with pilot:
        for _ in range(args.updates):
            micro, host, _ = next(feed)
            train_steps._update(ctx, run, state, micro, host)
    feed.close()
    plain = OpCount()
    bare.model.train()
    with plain:
        for _ in range(args.updates):
            bare.update()
    n = args.updates
    print(f"campaign {loaded.path.name} · task {task.name} · device {device} · {n} updates per arm")
    print(f"  {'aten op':44s} {'pilot':>8s} {'bare':>8s}  (per update)")
    for op in sorted(set(pilot.counts) | set(plain.counts)):
        if pilot.counts[op] != plain.counts[op]:
            print(f"  {op:44s} {pilot.counts[op] / n:8.1f} {plain.counts[op] / n:8.1f}")
    print(f"  {'total':44s} {sum(pilot.counts.values()) / n:8.1f} {sum(plain.counts.values()) / n:8.1f}")
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
