"""The pilot on another node: `pilot-tui agent CAMPAIGN.toml --rdzv host:port` (R28).

Headless, with no record of its own. It connects to the rendezvous store the dashboard's runner
hosts at `host:port` and, for every group the runner announces (`pilot/launch`), starts this
node's torchrun in the same c10d rendezvous, with this node's copy of the campaign: its ranks
join the runner's process group and serve its commands like node 0's. Before joining it compares
the campaign and task file with the runner's (sha256) and refuses, by name, when they differ.

What it writes in the store, under the group's prefix: `agent/<node>` (host, pid, hashes, or the
refusal), `exit/<node>` when its torchrun ends on its own (torchrun's root cause); and its
heartbeat `pilot/beat/<id>` twice a second, so a node that dies is named within seconds. When the
runner tears a group down (`abort`) or announces a newer one, it ends its torchrun and follows.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ...core.reasons import first_line
from ...core.spec import SpecError, endpoint_ok, load_spec
from ..processes.fresh_process import task_file_sha256
from .group import root_cause, start_torchrun, torchrun_command

POLL_S = 0.2
CONNECT_WAIT_S = 600.0  # how long an agent started before the dashboard waits for its store


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pilot-tui agent", description=__doc__.splitlines()[0])
    p.add_argument(
        "campaign", type=Path, help="this node's copy of the campaign file (identical to node 0's)"
    )
    p.add_argument(
        "--rdzv", required=True, help="host:port of the dashboard's node ([distributed] rdzv_endpoint)"
    )
    p.add_argument(
        "--node-rank", type=int, default=-1, help="this node's number (default: the next free one)"
    )
    p.add_argument(
        "--work-dir", type=Path, default=None, help="torchrun logs and rank files (default: a temp folder)"
    )
    p.add_argument(
        "--wait-s", type=float, default=CONNECT_WAIT_S, help="how long to wait for the dashboard's store"
    )
    p.add_argument("--once", action="store_true", help="serve one group, then exit (tests)")
    return p


class Agent:
    """One node's follower of the runner's groups."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.host_name = socket.gethostname()
        self.id = f"{self.host_name}-{os.getpid()}"
        host, _, port = args.rdzv.rpartition(":")
        self.endpoint = args.rdzv
        self.store = _connect(host.strip("[]"), int(port), args.wait_s)
        self.beat_store = _connect(host.strip("[]"), int(port), args.wait_s)  # its own connection
        self.work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="pilot-agent-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.stop = threading.Event()

    def beat(self) -> None:
        """Thread: the agent's heartbeat, twice a second, until it stops."""
        while not self.stop.wait(0.5):
            try:
                self.beat_store.set(f"pilot/beat/{self.id}", json.dumps({"t": time.time()}))
            except Exception:
                self.stop.set()  # the dashboard's store is gone: the main loop ends too

    def serve(self) -> int:
        threading.Thread(target=self.beat, daemon=True, name="agent-beat").start()
        self.beat_store.set(f"pilot/beat/{self.id}", json.dumps({"t": time.time()}))
        print(f"pilot-tui agent: connected to {self.endpoint} as {self.id}", flush=True)
        last = 0
        try:
            while not self.stop.is_set():
                launch = self._next_launch(last)
                if launch is None:
                    break
                last = int(launch["generation"])
                self._serve_group(launch)
                if self.args.once:
                    break
        except (RuntimeError, OSError, dist.DistStoreError) as exc:
            print(f"pilot-tui agent: the dashboard's store at {self.endpoint} closed ({exc})", flush=True)
        finally:
            self.stop.set()
        return 0

    def _next_launch(self, last: int) -> dict[str, Any] | None:
        while not self.stop.is_set():
            if self.store.check(["pilot/launch"]):
                launch = json.loads(self.store.get("pilot/launch"))
                if int(launch["generation"]) > last:
                    return launch
            time.sleep(POLL_S)
        return None

    def _serve_group(self, launch: dict[str, Any]) -> None:
        prefix = launch["prefix"]
        group = dist.PrefixStore(prefix, self.store)
        node = self.args.node_rank if self.args.node_rank >= 0 else int(group.add("claim", 1))
        said: dict[str, Any] = {"host": self.host_name, "pid": os.getpid(), "id": self.id, "node": node}
        # Read afresh for every group: a file fixed after a refusal is picked up by the next one.
        try:
            loaded = load_spec(self.args.campaign)
            said |= {"spec_sha256": loaded.sha256, "task_sha256": task_file_sha256(loaded)}
        except (SpecError, OSError, ValueError) as exc:
            said["refused"] = f"its campaign does not load: {first_line(str(exc))}"
            loaded = None
        if loaded is not None:
            for what, key in (("campaign file", "spec_sha256"), ("task file", "task_sha256")):
                if said[key] != launch[key]:
                    said["refused"] = (
                        f"its {what} differs from node 0's (sha256 {said[key][:12] or '-'}… there, "
                        f"{launch[key][:12] or '-'}… on node 0): copy the same files to every node"
                    )
                    break
        if not 0 < node < int(launch["nnodes"]):
            said["refused"] = f"node {node} is not one of nodes 1..{int(launch['nnodes']) - 1} (nnodes)"
        group.set(f"agent/{node}", json.dumps(said))
        if "refused" in said:
            print(f"pilot-tui agent: group {launch['generation']}: refused: {said['refused']}", flush=True)
            return
        cmd = torchrun_command(
            launch, self.endpoint, Path(loaded.path), loaded.sha256, self.work_dir, node=node
        )
        log_path = self.work_dir / f"torchrun-g{launch['generation']}.log"
        print(f"pilot-tui agent: group {launch['generation']}: node {node} joins", flush=True)
        proc = start_torchrun(cmd, log_path, int(launch["threads"]))
        ended_by_runner = False
        while proc.poll() is None:
            if self.stop.is_set() or group.check(["abort"]) or self._newer(launch):
                ended_by_runner = True
                break
            time.sleep(POLL_S)
        if ended_by_runner:
            _end(proc)
            return
        text = log_path.read_text(errors="replace")
        cause = root_cause(text)
        if proc.returncode == 0:
            how = "its torchrun ended"
        elif cause is not None:
            how = f"rank {cause[0]} {cause[1]}"
        else:
            how = f"its torchrun exited with code {proc.returncode}"
        if proc.returncode != 0:
            tail = [ln for ln in text.splitlines() if ln.strip()][-8:]
            group.set(f"exit/{node}", json.dumps({"code": proc.returncode, "cause": how, "tail": tail}))
        print(f"pilot-tui agent: group {launch['generation']}: {how}", flush=True)

    def _newer(self, launch: dict[str, Any]) -> bool:
        current = json.loads(self.store.get("pilot/launch"))
        return int(current["generation"]) > int(launch["generation"])


def _connect(host: str, port: int, wait_s: float) -> dist.TCPStore:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return dist.TCPStore(
                host, port, is_master=False, timeout=dt.timedelta(seconds=30), wait_for_workers=False
            )
        except (RuntimeError, OSError, dist.DistStoreError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End this node's torchrun and its ranks (its own session: one killpg)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        load_spec(args.campaign)  # a bad file is one line and exit 2, before any connection
    except SpecError as exc:
        print(f"pilot-tui agent: {exc}", file=sys.stderr)
        return 2
    if not endpoint_ok(args.rdzv):
        print(f"pilot-tui agent: --rdzv {args.rdzv!r}: must be host:port", file=sys.stderr)
        return 2
    try:
        agent = Agent(args)
    except (RuntimeError, OSError, dist.DistStoreError) as exc:
        print(
            f"pilot-tui agent: no dashboard store at {args.rdzv} within {args.wait_s:g} s ({exc})",
            file=sys.stderr,
        )
        return 1
    signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
    return agent.serve()


if __name__ == "__main__":
    raise SystemExit(main())
