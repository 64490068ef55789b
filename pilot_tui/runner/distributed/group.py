"""The runner's side of a torchrun process group: launch, command, watch, tear down (R22).

The runner hosts a TCPStore; torchrun (`python -m torch.distributed.run`) starts the ranks
(`distributed/rank.py`), which connect to it and serve commands until told to stop. The group
lives across phases (the training state stays on the ranks, as in a real run) and is torn down
after any failure: a rank that raised, died or stopped making progress leaves the others in an
unknown place in their collectives, so the next step starts a fresh group.

Every wait here is bounded: a dead rank is seen through its pid and torchrun's exit, a hung one
through its heartbeat, and the runner gives up after `timeout_s` without any progress.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist

from ...core.events import json_restored
from ...core.launch import module_command, torchrun_script
from ...core.reasons import first_line
from ...core.verdict import FAIL
from ..processes.determinism import apply_spawn_env

POLL_S = 0.05
AGENT_SILENT_S = 10.0  # an agent beats twice a second: this long without one, its node is gone
START_GRACE_S = 180.0  # interpreter + torch import on every rank, on a loaded machine
FAILED_GRACE_S = 3.0  # once one rank failed, how long the others get to report before teardown


class GroupFailure(Exception):
    """The group could not finish a command; `reason` names the rank and the cause."""

    def __init__(self, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details or {}


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def root_cause(log: str) -> tuple[int, str] | None:
    """torchrun's 'Root Cause' block: (rank, cause) of the first failed worker, if it printed one."""
    block = log.rsplit("Root Cause", 1)
    if len(block) < 2:
        return None
    text = block[1]
    rank = re.search(r"rank\s*:\s*(\d+)", text)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", text)
    if not rank or not code:
        return None
    exit_code = int(code.group(1))
    cause = f"killed by {_signal_name(exit_code)}" if exit_code < 0 else f"exited with code {exit_code}"
    return int(rank.group(1)), cause


def last_error_line(log: str, rank: int) -> str:
    """The rank's own last `pilot-tui rank:` line, or torchrun's prefixed traceback line."""
    for line in reversed(log.splitlines()):
        if "pilot-tui rank:" in line and (f"[rank{rank}]" in line or "[rank" not in line):
            return line.split("pilot-tui rank:", 1)[1].strip()
    return ""


@dataclass(frozen=True)
class Nodes:
    """Where a group's ranks run: `count` nodes of `per_node` ranks. Several nodes meet through
    torchrun's c10d rendezvous at `endpoint`, whose store this runner hosts (R28)."""

    count: int = 1
    per_node: int = 1
    endpoint: str = ""
    join_timeout_s: float = 300.0
    task_sha256: str = ""

    @property
    def host(self) -> str:
        return self.endpoint.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.endpoint.rpartition(":")[2])


# One rendezvous store per endpoint for the runner's life: the agents on the other nodes stay
# connected to it across groups (a group is restarted after every failed phase).
_STORES: dict[str, dist.TCPStore] = {}


def rendezvous_store(nodes: Nodes) -> dist.TCPStore:
    """The store at the endpoint's port, hosted here (every torchrun agent is its client)."""
    store = _STORES.get(nodes.endpoint)
    if store is None:
        try:
            store = dist.TCPStore(
                "0.0.0.0", nodes.port, is_master=True, wait_for_workers=False, timeout=dt.timedelta(days=7)
            )
        except Exception as exc:
            raise GroupFailure(
                f"cannot host the rendezvous store on port {nodes.port} ({first_line_of(exc)}): "
                "is another pilot or torchrun using it?"
            ) from None
        _STORES[nodes.endpoint] = store
    return store


def first_line_of(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


@dataclass
class RankGroup:
    """A running torchrun group of `world` ranks serving one campaign."""

    world: int
    backend: str
    timeout_s: float
    spec_sha256: str
    log_path: Path
    proc: subprocess.Popen[bytes]
    store: dist.Store
    pids: dict[int, int] = field(default_factory=dict)
    seq: int = 0
    nodes: Nodes = field(default_factory=Nodes)
    # rank -> {"node", "host", ...} as each rank reported when it joined.
    info: dict[int, dict[str, Any]] = field(default_factory=dict)
    raw_store: dist.TCPStore | None = None
    prefix: str = ""
    # How long the ranks get to start: a captured trainer's script runs on every rank first.
    start_grace_s: float = START_GRACE_S
    # How many of the runner's rows this group's ranks have been sent (a group started after a
    # failure has seen none): later phases read earlier rows (final: the export's artifact).
    rows_sent: int = 0

    def who(self, rank: int) -> str:
        """'rank r', or 'node n (host) rank r' when the group spans several nodes."""
        if self.nodes.count < 2:
            return f"rank {rank}"
        node = self.info.get(rank, {}).get("node", rank // max(1, self.nodes.per_node))
        host = self.info.get(rank, {}).get("host")
        return f"node {node}{f' ({host})' if host else ''} rank {rank}"

    # ---------------------------------------------------------------- launch

    @classmethod
    def launch(
        cls,
        spec_path: Path,
        spec_sha256: str,
        work_dir: Path,
        world: int,
        backend: str,
        timeout_s: float,
        threads: int,
        check: Callable[[], None] = lambda: None,
        nodes: Nodes | None = None,
        start_grace_s: float = START_GRACE_S,
    ) -> RankGroup:
        """Start torchrun and wait until every rank (of every node) has joined the process group."""
        nodes = nodes or Nodes(per_node=world)
        work_dir.mkdir(parents=True, exist_ok=True)
        log_path = _unused_log(work_dir)
        rank_args = {
            "backend": backend,
            "timeout_s": timeout_s,
            "threads": threads,
            "nnodes": nodes.count,
            "nproc_per_node": nodes.per_node,
        }
        raw: dist.TCPStore | None = None
        if nodes.count > 1:
            raw = rendezvous_store(nodes)
            gen = raw.add("pilot/generation", 1)
            prefix = f"pilot/g{gen}"
            store: dist.Store = dist.PrefixStore(prefix, raw)
            launch = rank_args | {
                "generation": gen,
                "prefix": prefix,
                "rdzv_id": f"pilot-{os.getpid()}-{gen}",
                "join_timeout_s": nodes.join_timeout_s,
                "spec_sha256": spec_sha256,
                "task_sha256": nodes.task_sha256,
            }
            raw.set("pilot/launch", json.dumps(launch))  # the agents start their torchrun on this
            cmd = torchrun_command(launch, nodes.endpoint, spec_path, spec_sha256, work_dir, node=0)
        else:
            tcp = dist.TCPStore(
                "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=dt.timedelta(days=7)
            )
            store, prefix = tcp, ""
            cmd = torchrun_command(
                rank_args | {"store_port": tcp.port}, "", spec_path, spec_sha256, work_dir, node=0
            )
        proc = start_torchrun(cmd, log_path, threads)
        group = cls(
            world,
            backend,
            timeout_s,
            spec_sha256,
            log_path,
            proc,
            store,
            nodes=nodes,
            raw_store=raw,
            prefix=prefix,
            start_grace_s=start_grace_s,
        )
        try:
            group._wait_ready(check)
        except BaseException:
            group.close()
            raise
        return group

    def _wait_ready(self, check: Callable[[], None]) -> None:
        multi = self.nodes.count > 1
        # Several nodes: the others' agents must join the rendezvous within join_timeout_s (they
        # start torchrun when this group is announced; importing torch is part of the wait).
        limit = (self.nodes.join_timeout_s if multi else self.start_grace_s) + self.timeout_s
        deadline = time.monotonic() + limit
        waiting = set(range(self.world))
        while waiting:
            check()
            for r in sorted(waiting):
                if self.store.check([f"ready/{r}"]):
                    info = json.loads(self.store.get(f"ready/{r}"))
                    if "error" in info:
                        raise GroupFailure(
                            f"{self.who(r)} could not start: {info['error']}", self._log_tail()
                        )
                    self.info[r] = info
                    if multi:
                        self._same_files(r, info)
                    if int(info.get("node", 0)) == 0:  # a pid means something on this node only
                        self.pids[r] = int(info["pid"])
                    waiting.discard(r)
            if multi:
                self._check_nodes(joining=True)
            if self.proc.poll() is not None:
                if multi:
                    self._check_nodes(joining=True)
                    raise GroupFailure(self._not_joined(waiting), self._log_tail())
                raise GroupFailure(self._exit_reason("while starting"), self._log_tail())
            if time.monotonic() > deadline:
                if multi:
                    raise GroupFailure(self._not_joined(waiting), self._log_tail())
                names = ", ".join(str(r) for r in sorted(waiting))
                raise GroupFailure(
                    f"rank(s) {names} did not join the process group within {limit:.0f} s",
                    self._log_tail(),
                )
            time.sleep(POLL_S)

    # ---------------------------------------------------------------- the other nodes

    def _agents(self) -> dict[int, dict[str, Any]]:
        """node -> what its agent said when it took this group's launch."""
        out = {}
        for node in range(1, self.nodes.count):
            if self.store.check([f"agent/{node}"]):
                out[node] = json.loads(self.store.get(f"agent/{node}"))
        return out

    def _check_nodes(self, joining: bool = False) -> None:
        """Raise naming the node whose agent refused this group, whose torchrun ended, or whose
        agent stopped answering (the node died or lost the network)."""
        now = time.time()
        for node, agent in self._agents().items():
            name = f"node {node} ({agent.get('host', '?')})"
            if agent.get("refused"):
                raise GroupFailure(f"{name}: {agent['refused']}", {"node": node} | self._log_tail())
            if self.store.check([f"exit/{node}"]):
                end = json.loads(self.store.get(f"exit/{node}"))
                raise GroupFailure(
                    f"{name}: {end['cause']}", {"node": node, "node_tail": end.get("tail", [])}
                )
            beat_key = f"pilot/beat/{agent.get('id', '')}"
            if self.raw_store is not None and self.raw_store.check([beat_key]):
                silent = now - float(json.loads(self.raw_store.get(beat_key))["t"])
                if silent > AGENT_SILENT_S:
                    raise GroupFailure(
                        f"{name}: its agent stopped answering {silent:.0f} s ago (the node died or lost "
                        "the network)",
                        {"node": node},
                    )

    def _same_files(self, rank: int, info: dict[str, Any]) -> None:
        """Every node must run the same campaign and task file: a fail naming the node otherwise."""
        node = int(info.get("node", 0))
        for what, key, mine in (
            ("campaign file", "spec_sha256", self.spec_sha256),
            ("task file", "task_sha256", self.nodes.task_sha256),
        ):
            theirs = str(info.get(key, ""))
            if theirs != mine:
                raise GroupFailure(
                    f"node {node} ({info.get('host', '?')}): its {what} differs from node 0's "
                    f"(sha256 {theirs[:12] or '-'}… there, {mine[:12] or '-'}… here): copy the same files to every node",
                    {"node": node, "rank": rank},
                )

    def _not_joined(self, waiting: set[int]) -> str:
        """Which nodes never joined, by name when their agent answered, by number otherwise."""
        agents = self._agents()
        joined = {int(i.get("node", 0)) for i in self.info.values()}
        missing = sorted(set(range(1, self.nodes.count)) - joined)
        timed_out = "RendezvousTimeoutError" in self._log() or self.proc.poll() is None
        if not missing or not timed_out:
            # Node 0's own torchrun ended for a reason of its own (not the wait for the others).
            missing = [0, *missing] if 0 not in joined else missing
        why = []
        for node in missing:
            if node in agents:
                why.append(
                    f"node {node} ({agents[node].get('host', '?')}) answered but its ranks did not start"
                )
            elif node == 0:
                ended = f": {self._exit_reason('while starting')}" if self.proc.poll() is not None else ""
                why.append(f"node 0 (this one) did not start its ranks{ended}")
            else:
                why.append(f"no agent answered for node {node}")
        names = ", ".join(f"node {n}" for n in missing)
        return (
            f"{names} did not join the rendezvous at {self.nodes.endpoint} within "
            f"{self.nodes.join_timeout_s:g} s ({'; '.join(why)}): start `pilot-tui agent CAMPAIGN.toml "
            f"--rdzv {self.nodes.endpoint}` there"
        )

    # ---------------------------------------------------------------- commands

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self,
        command: dict[str, Any],
        on_progress: Callable[[str], None] = lambda _json: None,
        check: Callable[[], None] = lambda: None,
    ) -> dict[int, dict[str, Any]]:
        """Post one command, wait for every rank's result; raise GroupFailure naming the rank."""
        seq = self.seq
        self.seq += 1
        for r in range(self.world):
            self.store.set(f"beat/{r}", json.dumps({"t": time.time(), "note": "command posted"}))
        self.store.delete_key("progress")  # the last command's progress is not this one's
        self.store.set(f"cmd/{seq}", json.dumps(command))
        results: dict[int, dict[str, Any]] = {}
        beats: dict[int, float] = dict.fromkeys(range(self.world), time.time())
        last_progress = b""
        first_failure_at: float | None = None
        while len(results) < self.world:
            check()  # raises Cancelled; the caller tears the group down
            now = time.time()
            for r in range(self.world):
                if r in results:
                    continue
                if self.store.check([f"result/{seq}/{r}"]):
                    results[r] = json_restored(json.loads(self.store.get(f"result/{seq}/{r}")))
                    if _failed(results[r]) and first_failure_at is None:
                        first_failure_at = now
                    continue
                beats[r] = json.loads(self.store.get(f"beat/{r}"))["t"]
            if self.store.check(["progress"]):
                raw = self.store.get("progress")
                if raw != last_progress:
                    last_progress = raw
                    on_progress(raw.decode())
            if self.nodes.count > 1:
                self._check_nodes()
            dead = self._dead_ranks()
            if dead or self.proc.poll() is not None:
                reason, causes = self._death_reason(dead)
                raise GroupFailure(reason, self._failure_details(results, causes))
            silent = [r for r in range(self.world) if r not in results]
            if first_failure_at is not None and now - first_failure_at > min(self.timeout_s, FAILED_GRACE_S):
                reason, causes = self._raised_reason(results, silent, beats, now)
                raise GroupFailure(reason, self._failure_details(results, causes))
            # Every rank silent: twice the collective timeout, so that a rank stuck in a collective
            # first reports its own timeout and the silent one is named as the cause.
            if silent and all(now - beats[r] > 2 * self.timeout_s for r in silent):
                oldest = min(beats[r] for r in silent)
                hung = [r for r in silent if beats[r] - oldest < 1.0]
                causes = {r: f"no progress for {now - beats[r]:.0f} s" for r in hung}
                reason = "; ".join(f"{self.who(r)}: {c}" for r, c in causes.items())
                raise GroupFailure(
                    f"{reason} (timeout_s = {self.timeout_s:g})", self._failure_details(results, causes)
                )
            time.sleep(POLL_S)
        return results

    def _dead_ranks(self) -> dict[int, str]:
        dead = {}
        for r, pid in self.pids.items():
            try:
                status = psutil.Process(pid).status()
            except psutil.NoSuchProcess:
                dead[r] = "its process is gone"
                continue
            if status == psutil.STATUS_ZOMBIE:
                dead[r] = "its process died"
        return dead

    def _death_reason(self, dead: dict[int, str]) -> tuple[str, dict[int, str]]:
        # torchrun prints which worker failed first and how; give it a moment to say so.
        deadline = time.monotonic() + 5.0
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        cause = root_cause(self._log())
        if cause is not None:
            rank, how = cause
            line = last_error_line(self._log(), rank)
            how += f": {line}" if line else ""
            return f"{self.who(rank)} {how}", {rank: how}
        if dead:
            r = min(dead)
            return f"{self.who(r)} died: {dead[r]}", {r: f"died: {dead[r]}"}
        return self._exit_reason("during the phase"), {}

    def _raised_reason(
        self, results: dict[int, dict[str, Any]], silent: list[int], beats: dict[int, float], now: float
    ) -> tuple[str, dict[int, str]]:
        failed = [r for r in sorted(results) if _failed(results[r])]
        parts = [f"{self.who(r)}: {_failure_line(results[r])}" for r in failed]
        # A rank that timed out in a collective is the victim of another rank, not the cause.
        culprits = [r for r in failed if not _collective_timeout(results[r])]
        causes = {r: _failure_line(results[r]) for r in failed}
        if not culprits and silent:
            causes |= {r: f"no progress for {now - beats[r]:.0f} s" for r in silent}
            parts = [f"{self.who(r)}: {causes[r]}" for r in silent] + parts
        elif silent:
            first = ", ".join(map(str, culprits))
            causes |= {r: f"stopped after rank {first} failed" for r in silent}
            parts.append(f"rank(s) {', '.join(map(str, silent))} stopped after the failure")
        return "; ".join(parts), causes

    def _exit_reason(self, when: str) -> str:
        code = self.proc.poll()
        line = last_error_line(self._log(), 0)
        return f"torchrun exited {when} with code {code}" + (f": {line}" if line else "")

    def _failure_details(self, results: dict[int, dict[str, Any]], causes: dict[int, str]) -> dict[str, Any]:
        return {"rank_results": results, "rank_causes": causes} | self._log_tail()

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _log_tail(self) -> dict[str, Any]:
        lines = [ln for ln in self._log().splitlines() if ln.strip()]
        return {"torchrun_log": str(self.log_path), "torchrun_tail": lines[-12:]}

    # ---------------------------------------------------------------- teardown

    def close(self, graceful: bool = True) -> None:
        """Stop the ranks; whatever does not stop within a few seconds is killed."""
        if graceful and self.proc.poll() is None:
            try:
                self.store.set(f"cmd/{self.seq}", json.dumps({"op": "stop"}))
                self.proc.wait(timeout=10)
            except Exception:
                pass
        if self.nodes.count > 1:
            # The other nodes' agents end their torchrun on this (their pids mean nothing here).
            with contextlib.suppress(Exception):
                self.store.set("abort", "1")
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def die_with_launcher() -> None:
    # In the child before exec (no import there: the runner has threads): if the runner is
    # killed, the kernel ends torchrun too, and the ranks die with torchrun. No orphans.
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_torchrun(cmd: list[str], log_path: Path, threads: int) -> subprocess.Popen:
    """One node's torchrun (agent and ranks), on this node's runner or a `pilot-tui agent`.

    Every node's ranks get the runner's reproducibility settings (cuBLAS workspace) as fresh
    workers do. Its own session, so one killpg ends the whole tree; it dies with its launcher, as
    a node that goes down loses its ranks."""
    env = dict(apply_spawn_env(dict(os.environ)), PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_launcher,
        )


def torchrun_command(
    launch: dict[str, Any], endpoint: str, spec_path: Path, spec_sha256: str, work_dir: Path, node: int
) -> list[str]:
    """torchrun of one node's ranks: standalone on one node, else the c10d rendezvous at
    `endpoint`, whose store the dashboard's runner hosts (`is_host=0` on every node)."""
    cmd: list[str] = []
    if launch["nnodes"] > 1:
        cmd += [
            "--nnodes",
            str(launch["nnodes"]),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            launch["rdzv_id"],
            "--rdzv-conf",
            f"is_host=0,join_timeout={int(launch['join_timeout_s'])}",
        ]
    else:
        cmd += ["--standalone"]
    cmd += [
        "--nproc_per_node",
        str(launch["nproc_per_node"]),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.2",
        *torchrun_script("pilot_tui.runner.distributed.rank"),
        "--spec",
        str(spec_path),
        "--spec-sha256",
        spec_sha256,
        "--threads",
        str(launch["threads"]),
        "--work-dir",
        str(work_dir),
        "--backend",
        launch["backend"],
        "--timeout-s",
        str(launch["timeout_s"]),
        # Not torchrun's own flag names (its parser would take an abbreviation as one of its own).
        "--pilot-node",
        str(node),
        "--pilot-nnodes",
        str(launch["nnodes"]),
    ]
    if launch["nnodes"] > 1:
        host, _, port = endpoint.rpartition(":")
        cmd += ["--store-host", host.strip("[]"), "--store-port", port, "--store-prefix", launch["prefix"]]
    else:
        cmd += ["--store-port", str(launch["store_port"])]
    return module_command("torch.distributed.run", cmd)


def _unused_log(work_dir: Path) -> Path:
    i = 1
    while (work_dir / f"torchrun-{i}.log").exists():
        i += 1
    return work_dir / f"torchrun-{i}.log"


def _failed(result: dict[str, Any]) -> bool:
    return "error" in result or result.get("row", {}).get("verdict") == FAIL


def _failure_line(result: dict[str, Any]) -> str:
    if "error" in result:
        return first_line(str(result["error"]))
    return first_line(str(result["row"].get("reason", ""))) or "failed"


def _collective_timeout(result: dict[str, Any]) -> bool:
    text = _failure_line(result).lower()
    return "timed out" in text or "timeout" in text or "connection closed by peer" in text or "gloo" in text


def default_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"
