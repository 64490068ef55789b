"""One rank of the pilot's process group, started by torchrun (R22).

`python -m torch.distributed.run --nproc_per_node N -m pilot_tui.runner.distributed.rank --spec …`

Each rank loads the spec and the task itself, joins the process group, then serves commands the
runner posts in a TCPStore it hosts: `cmd/<seq>` in, `result/<seq>/<rank>` out. A step command
runs the *same* phase body as a single process (`phases.execute`), whose training code shards the
data, wraps the model and all-reduces the loss normaliser when a process group exists; the row it
makes is this rank's row, and the runner merges the ranks' rows into one. Every rank writes a
heartbeat (`beat/<rank>`) on each progress tick, so a rank that stops making progress is named.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ...core.events import PhaseProgress, RecordUpdate, RunnerError, WireMessage, json_safe
from ...core.spec import load_spec
from ...core.steps import Step
from ...tasks.loader import load_task
from ..context import RunContext
from ..loop.residency import MIB, state_bytes
from ..memory import heap
from ..phases import PHASES, execute
from ..phases.base import AFTER_ROW, Outcome
from ..processes.fresh_process import task_file_sha256
from ..processes.lifetime import die_with_parent, exit_now
from . import state as dist_state
from .interconnect import measure_allreduce

STORE_TIMEOUT = dt.timedelta(days=7)  # a rank waits for its next command as long as the runner lives


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pilot_tui.runner.distributed.rank")
    p.add_argument("--spec", type=Path, required=True)
    p.add_argument("--spec-sha256", required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--work-dir", type=Path, required=True)
    p.add_argument("--store-port", type=int, required=True)
    p.add_argument("--store-host", default="127.0.0.1")
    p.add_argument("--store-prefix", default="", help="this group's keys in a shared rendezvous store")
    p.add_argument("--pilot-node", type=int, default=0, help="this node's index (0: the dashboard's)")
    p.add_argument("--pilot-nnodes", type=int, default=1)
    p.add_argument("--backend", required=True)
    p.add_argument("--timeout-s", type=float, required=True)
    return p


class Forward:
    """The rank's `emit`: progress becomes a heartbeat (and rank 0's progress the view's); record
    updates and errors travel back with the result (rank 0's alone: one copy of each)."""

    def __init__(self, store: dist.TCPStore, rank: int) -> None:
        self.store, self.rank = store, rank
        self.carried: list[str] = []
        self._last = 0.0
        self.beat("started")

    def beat(self, note: str = "") -> None:
        now = time.time()
        if not note and now - self._last < 1.0:  # a plain "still alive" at most once a second
            return
        self._last = now
        self.store.set(f"beat/{self.rank}", json.dumps({"t": now, "note": note}))

    def publish_ticks(self, stop: threading.Event) -> None:
        """Thread: the training code's last tick becomes this rank's heartbeat, twice a second."""

        seen = 0.0
        while not stop.wait(0.5):
            if dist_state.last_tick != seen:
                seen = dist_state.last_tick
                self.store.set(f"beat/{self.rank}", json.dumps({"t": seen, "note": "tick"}))

    def __call__(self, message: WireMessage) -> None:
        if isinstance(message, PhaseProgress):
            self.beat(message.message)
            if self.rank == 0:
                self.store.set("progress", message.to_json())
        elif isinstance(message, RecordUpdate | RunnerError) and self.rank == 0:
            self.carried.append(message.to_json())


def _fault(cmd: dict[str, Any], rank: int, phase: str) -> None:
    """Test hook (the `fault` override, never a spec key): make one rank raise, die or hang."""
    fault = cmd.get("overrides", {}).get("fault") or {}
    if not fault or int(fault.get("rank", -1)) != rank:
        return
    kind = fault.get("kind")
    if kind == "raise":
        raise RuntimeError(f"fault injected on rank {rank} in {phase}")
    if kind == "kill":
        os.kill(os.getpid(), 9)
    if kind == "hang":
        while True:  # no progress, no collective: what a deadlocked user callback looks like
            time.sleep(0.2)


def state_mb_hook(ctx, step, row: dict[str, Any]) -> None:
    """This rank's own weights + gradients + optimizer state (half per rank under FSDP on 2 ranks).

    First among the after-row hooks: the variant comparison frees a variant's state after its row.
    """

    state = ctx.states.get(step.variant)
    if state is not None:
        row.setdefault("details", {})["rank_state_mb"] = round(sum(state_bytes(state).values()) / MIB, 3)


# The final reload checks the single exported copy in a fresh process: one check, on rank 0.
RANK0_ONLY = ("final",)


def _rank0_only(_ctx, _run):

    return Outcome(details={"note": "rank 0 reloads the single exported copy and compares"})


def _run_step(ctx, cmd: dict[str, Any]) -> dict[str, Any]:

    step = Step(key=cmd["step"], phase=cmd["phase"], variant=cmd["variant"])
    ctx.rows.extend(cmd.get("rows", []))  # the runner's rows this rank has not seen yet
    overrides = {k: v for k, v in cmd.get("overrides", {}).items() if k != "fault"}
    body = PHASES.get(step.phase)
    rank = dist.get_rank()
    if body is not None and step.phase in RANK0_ONLY and rank != 0:
        return execute(ctx, step, overrides, _rank0_only)
    if body is None or "fault" not in cmd.get("overrides", {}):
        return execute(ctx, step, overrides)

    def faulty(ctx_, run):
        # Inside the measured phase, after the other ranks have started it.
        _fault(cmd, rank, step.phase)
        return body(ctx_, run)

    return execute(ctx, step, overrides, faulty)


def _open(loaded, device: torch.device, forward: Forward, work_dir: Path) -> RunContext:
    """This rank's campaign: the task loaded, or the user's trainer script captured on this rank
    (its Trainer reads LOCAL_RANK / WORLD_SIZE and joins the group this rank already started)."""
    if loaded.spec.task.captures_trainer:
        # transformers loads only for a trainer campaign.
        from ..subject.trainer.campaign import open_trainer_campaign

        return open_trainer_campaign(loaded, forward, work_dir, threading.Event(), heartbeat=forward.beat)
    return RunContext(loaded, load_task(loaded), device, forward, work_dir, heartbeat=forward.beat)


def serve(args: argparse.Namespace) -> int:

    die_with_parent()
    if args.threads:
        torch.set_num_threads(args.threads)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # Several nodes: the pilot numbers the nodes (the dashboard's is 0, so global rank 0 is on it,
    # beside the record), not torchrun's rendezvous, which orders nodes by host name and pid.
    rank = args.pilot_node * per_node + local if args.pilot_nnodes > 1 else int(os.environ["RANK"])
    store = _store(args)
    forward = Forward(store, rank)
    host = socket.gethostname()
    try:
        loaded = load_spec(args.spec)
        if loaded.sha256 != args.spec_sha256:
            raise ValueError(f"{args.spec}: the campaign file changed since the runner read it")
        if loaded.spec.batch.device == "cpu" or not torch.cuda.is_available():
            device = torch.device("cpu")
        else:
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
        timeout = dt.timedelta(seconds=args.timeout_s)
        if args.pilot_nnodes > 1:
            world = args.pilot_nnodes * per_node
            pg_store = dist.PrefixStore("pg", store)
            dist.init_process_group(
                args.backend, store=pg_store, rank=rank, world_size=world, timeout=timeout
            )
        else:
            dist.init_process_group(args.backend, timeout=timeout)
        groups = node_groups(args.pilot_nnodes, per_node)
        AFTER_ROW.insert(0, state_mb_hook)
        heap.freeze_imports()
        ctx = _open(loaded, device, forward, args.work_dir)
        heap.keep_opened()  # as the runner does: collections walk the phases' objects only
        ready = {
            "pid": os.getpid(),
            "device": str(device),
            "node": args.pilot_node,
            "host": host,
            "local_rank": local,
            "spec_sha256": loaded.sha256,
            "task_sha256": task_file_sha256(loaded),
        }
        store.set(f"ready/{rank}", json.dumps(ready))
    except Exception as exc:
        store.set(f"ready/{rank}", json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        raise
    stop = threading.Event()
    # A client of its own: TCPStore calls from two threads must not share one connection.
    ticker = Forward(_store(args), rank)
    threading.Thread(target=ticker.publish_ticks, args=(stop,), daemon=True, name="ticks").start()
    seq = 0
    while True:
        cmd = json.loads(store.get(f"cmd/{seq}"))
        if cmd["op"] == "stop":
            break
        forward.carried = []
        t0 = time.perf_counter()
        try:
            if cmd["op"] == "allreduce":
                mb, iters = float(cmd["mb"]), cmd["iters"]
                out: dict[str, Any] = {"allreduce": measure_allreduce(mb, device, iters)}
                # Within a node (every node at once, as a real run's intra-node reductions) and
                # across nodes (the ranks of one local index): two different links.
                for name, group in groups.items():
                    out[name] = measure_allreduce(mb, device, iters, group=group)
            else:
                out = {"row": _run_step(ctx, cmd)}
        except Exception as exc:  # a failure the phase registry did not catch still reaches the runner
            out = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        out |= {
            "rank": rank,
            "node": args.pilot_node,
            "host": host,
            "seconds": time.perf_counter() - t0,
            "carried": forward.carried,
        }
        store.set(f"result/{seq}/{rank}", json.dumps(json_safe(out), allow_nan=False))
        seq += 1
    stop.set()
    dist.destroy_process_group()
    exit_now(0)


def _store(args: argparse.Namespace) -> dist.Store:
    """A client of the runner's command store (this group's keys, when the store is shared)."""
    tcp = dist.TCPStore(args.store_host, args.store_port, is_master=False, timeout=STORE_TIMEOUT)
    return dist.PrefixStore(args.store_prefix, tcp) if args.store_prefix else tcp


def node_groups(nnodes: int, per_node: int) -> dict[str, Any]:
    """This rank's group within its node and across nodes (at its local index), when each has
    more than one member. Every rank creates every group, in one order (a collective)."""
    if nnodes < 2:
        return {}
    rank = dist.get_rank()
    node, local = divmod(rank, per_node)
    out: dict[str, Any] = {}
    for k in range(nnodes):
        g = dist.new_group([k * per_node + i for i in range(per_node)])
        if k == node and per_node > 1:
            out["within_node"] = g
    for i in range(per_node):
        g = dist.new_group([k * per_node + i for k in range(nnodes)])
        if i == local:
            out["across_nodes"] = g
    return out


def main() -> int:
    args = _parser().parse_args()
    try:
        return serve(args)
    except Exception as exc:
        traceback.print_exc()
        print(f"pilot-tui rank: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
