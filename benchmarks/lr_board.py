"""The demo's LR board on this machine (R13 acceptance: 3 LRs × 1 seed × 200 updates in < 60 s).

    .venv/bin/python benchmarks/lr_board.py [CAMPAIGN.toml]

1. Runs every `lr_run` step of the campaign in one runner process, as the headless CLI would,
   and prints each run's duration, the total and its ratio to the 60 s target.
2. In this process, times the same number of bare `train_update` calls (no validation, no
   stop checks, no events) at the control LR and prints the board's overhead as a ratio.

Other processes on the machine slow both unevenly: the load average is printed beside them, and
torch's thread count (two OpenMP threads fighting other processes for two cores can be many
times slower than one).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 60.0


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "campaigns" / "demo.toml"
    raw = tomllib.loads(source.read_text())
    from pilot_tui.core.events import PhaseFinished
    from pilot_tui.session.driver import Session

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / source.name
        raw.setdefault("task", {})
        if "file" in raw["task"]:
            raw["task"]["file"] = str((source.parent / raw["task"]["file"]).resolve())
        path.write_text(tomli_w.dumps(raw))
        session = Session(path, records_dir=Path(tmp) / "records")
        session.start()
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        total = 0.0
        try:
            for step in [s for s in session.steps if s.phase == "lr_run"]:
                t0 = time.perf_counter()
                rows = [e.row for e in session.run_step(step.key) if isinstance(e, PhaseFinished)]
                took = time.perf_counter() - t0
                total += took
                print(f"  {step.key:<24} {took:7.2f} s  {rows[-1]['verdict']:<4}  {rows[-1]['reason']}")
        finally:
            session.close()
        runs = session.record.data.get("runs", [])
        board = session.record.data.get("board", {})
        print(
            f"board total {total:.2f} s for {len(runs)} runs; ratio to the {TARGET_S:g} s target {total / TARGET_S:.2f}"
        )
        print(f"board decision: {board.get('decision', '-')}")

        import torch

        from pilot_tui.core.spec import load_spec
        from pilot_tui.runner.context import RunContext, pick_device
        from pilot_tui.runner.loop.training import train_update
        from pilot_tui.tasks.loader import load_task

        loaded = load_spec(path)
        ctx = RunContext(
            loaded, load_task(loaded), pick_device(loaded.spec.batch.device), lambda m: None, Path(tmp)
        )
        board_spec = loaded.spec.lr_board
        cfg = ctx.with_config("control", lr=board_spec.control, total_updates=board_spec.updates)
        state = ctx.new_state(cfg)
        t0 = time.perf_counter()
        for _ in range(board_spec.updates):
            stats = train_update(state, ctx.task, ctx.device, loaded.spec.optim.grad_clip)
        float(stats.loss)
        bare = time.perf_counter() - t0
        per_run = total / max(1, len(runs))
        print(
            f"bare loop {bare:.2f} s for {board_spec.updates} updates (torch threads {torch.get_num_threads()}); "
            f"a board run costs {per_run / bare:.2f} × the bare loop"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
