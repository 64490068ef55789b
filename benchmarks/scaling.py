"""1 rank against 2 ranks under torchrun on CPU (gloo): what the pilot measures for a multi-GPU run.

    python benchmarks/scaling.py [--updates 200] [--steady 20]

Prints, side by side and measured in this run:
- the per-update time of the same global batch on 1 process and on 2 DDP ranks;
- the all-reduce of the stack phase (bus bandwidth by the nccl-tests definition, latency);
- the plan's predicted time for a `--updates` run on 2 ranks (from the 2-rank pilot rows) against
  an actual `--updates` run on 2 ranks: predicted / actual (within ±10 % on a quiet machine);
- the data-wait share of the steady phase with a collate made slow on purpose;
- the checkpoint save under FSDP2 on 2 ranks, sharded (torch.distributed.checkpoint, each rank its
  shards) against full (the gathered state dict, rank 0 writes): save time (slowest rank), bytes
  each rank wrote and each rank's peak RSS in the save phase.

A ratio, not a target: on a shared machine the two processes compete for the same cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pilot_tui.analysis.plan import choice_sheet, project, read_facts  # noqa: E402
from pilot_tui.core.events import PhaseFinished  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402

SKIP = ["inspect", "split", "overfit", "lr_run", "resume", "final", "export", "eval_longest"]


def campaign(folder: Path, world: int, steady: int, updates: int) -> Path:
    raw = tomllib.loads((REPO / "campaigns" / "demo.toml").read_text())
    raw.pop("variants", None)
    raw.pop("lr_board", None)
    raw["task"]["options"] = {"n_conversations": 240, "seed": 0}
    raw["phases"] = {"steady_updates": steady, "skip": SKIP}
    raw["batch"] |= {"microbatch": 2, "accumulation": 4 // world}
    raw["batch"].pop("replicas", None)
    effective = 8
    raw["plan"] |= {
        "dataset_size": updates * effective,
        "epochs": 1,
        "safety_margin": 0.0,
        "priority": ["control"],
    }
    raw["plan"] |= {"evaluations": 1, "checkpoints": 1}
    if world > 1:
        raw["distributed"] = {"strategy": "ddp", "nproc_per_node": world, "timeout_s": 120, "allreduce_mb": 8}
    path = folder / f"campaign-{world}.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def run(session: Session, key: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    # Drained to the end: the runner's Idle must be read before the next step is sent.
    rows = [ev.row for ev in session.run_step(key, overrides) if isinstance(ev, PhaseFinished)]
    if not rows:
        raise RuntimeError(f"{key}: no row")
    return rows[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--steady", type=int, default=20)
    ap.add_argument("--saves", type=int, default=3, help="saves of each kind (the median is printed)")
    args = ap.parse_args()
    out: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for world in (1, 2):
            session = Session(campaign(folder, world, args.steady, args.updates), folder / f"records-{world}")
            session.start()
            rows = {s.key: run(session, s.key) for s in session.steps}
            out[world] = {"rows": rows}
            if world == 2:
                data = tomllib.loads(session.record.path.read_text())
                # The plan's own estimate for the control, from the 2-rank rows of this record.
                facts = read_facts(data)
                control = choice_sheet(facts).configuration("control")
                assert control is not None
                est = project(control, facts).run
                # The actual run: the same group, `updates - 1` more updates after the first one.
                t0 = time.perf_counter()
                long = run(session, "steady", {"steady_updates": args.updates - 1})
                wall = time.perf_counter() - t0
                actual = rows["load"]["duration_s"] + rows["first_step"]["duration_s"]
                actual += long["details"]["step_time_s"] * (args.updates - 1)
                out[world] |= {"estimate": est, "actual_s": actual, "long_wall_s": wall, "long": long}
                slow = run(session, "steady", {"collate_delay_s": 0.02})
                out[world]["slow"] = slow
                # The same state under FSDP2, saved both ways in the same group, alternately.
                run(session, "first_step", {"strategy": "fsdp"})
                saves: dict[str, list[dict[str, Any]]] = {"sharded": [], "full": []}
                for _ in range(args.saves):
                    for kind in saves:
                        saves[kind].append(run(session, "save", {"strategy": "fsdp", "checkpoint": kind}))
                out[world]["saves"] = saves
            session.close()
    one, two = out[1]["rows"]["steady"]["details"], out[2]["rows"]["steady"]["details"]
    print(
        f"per-update time, global batch 8:  1 process {one['step_time_s'] * 1e3:.1f} ms · 2 ranks (ddp, gloo) "
        f"{two['step_time_s'] * 1e3:.1f} ms · ratio 2/1 = {two['step_time_s'] / one['step_time_s']:.2f}"
    )
    per_rank = [
        f"rank {r['rank']} {r['step_time_s'] * 1e3:.1f} ms" for r in out[2]["rows"]["steady"]["ranks"]
    ]
    print(f"  per rank: {', '.join(per_rank)}")
    ic = out[2]["rows"]["stack"]["details"]["interconnect"]
    print(
        f"all-reduce {ic['size_mb']:g} MiB on {ic['ranks']} ranks ({ic['backend']}): {ic['time_s'] * 1e3:.2f} ms, "
        f"algbw {ic['algbw_gbps']:.3f} GB/s, busbw {ic['busbw_gbps']:.3f} GB/s, latency {ic['latency_us']:.0f} µs "
        f"(group start {ic['group_start_s']:.1f} s)"
    )
    est = out[2]["estimate"]
    predicted = est.train_s if est is not None else float("nan")
    print(
        f"{args.updates}-update run on 2 ranks: plan predicted {predicted:.2f} s (train: load + first + "
        f"{args.updates - 1} × {(est.step_time_s if est is not None else 0) * 1e3:.1f} ms) · actual {out[2]['actual_s']:.2f} s · "
        f"predicted/actual = {predicted / out[2]['actual_s']:.3f}"
    )
    slow = out[2]["slow"]
    print(
        f"data wait with a collate slowed by 20 ms per microbatch: {slow['details']['data_wait_share']:.0%} of the "
        f"update (normal collate: {two['data_wait_share']:.1%}); row verdict {slow['verdict']}: {slow['reason']}"
    )
    for kind, rows_ in out[2]["saves"].items():
        ok = [r for r in rows_ if r["verdict"] == "pass"]
        if not ok:
            print(f"save ({kind}) under fsdp on 2 ranks: failed: {rows_[-1]['reason']}")
            continue
        times = sorted(r["details"]["save_s"] for r in ok)
        last = ok[-1]
        per = ", ".join(
            f"rank {r['rank']} {r['written_mb']:.2f} MiB written, peak RSS {r.get('peak_rss_mb', 0):.0f} MiB"
            for r in last["ranks"]
        )
        print(
            f"save ({kind}) under fsdp on 2 ranks: {statistics.median(times) * 1e3:.1f} ms median of {len(ok)} "
            f"(slowest rank) · {per}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
