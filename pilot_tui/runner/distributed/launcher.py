"""Which steps run on the ranks, and how the ranks' rows become the phase's one row (R22).

The view side and the record are unchanged in kind: one row per phase. The row is rank 0's row
with the verdict and reason of the worst rank, the memory of the rank with the highest peak,
the slowest rank's duration and step time, and `ranks`: one entry per rank with its own peaks,
duration, step time and data-wait share.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

import torch

from ...core import phase_table
from ...core.events import PhaseFinished, PhaseStarted, decode
from ...core.rows import Memory, phase_row
from ...core.spec import LoadedSpec
from ...core.steps import Step
from ...core.verdict import CANCELLED_BY_USER, FAIL, PASS, Verdict, worst
from ..context import CURRENT_STEP, Cancelled, RunContext
from ..processes.fresh_process import task_file_sha256
from .group import START_GRACE_S, GroupFailure, Nodes, RankGroup, default_backend

# The engine phases, the variant phases (same names), resume and final run on the ranks; the
# data checks, the fit search and the LR board stay in the runner's single process.
GROUP = "rank_group"  # ctx.memo key
# Read with the slowest rank's interval: the load and the machine's speed it was timed at.
_PACE_KEYS = ("runqueue_share", "speed_reference_s")


def resolve_world(loaded: LoadedSpec, device: torch.device) -> LoadedSpec:
    """nproc_per_node unset and nothing declared on cuda: every visible GPU (batch.replicas too)."""
    spec = loaded.spec
    d = spec.distributed
    if d.strategy == "none" or d.nproc_per_node or device.type != "cuda":
        return loaded
    n = max(1, torch.cuda.device_count())
    spec = dataclasses.replace(
        spec,
        batch=dataclasses.replace(spec.batch, replicas=n * d.nnodes),
        distributed=dataclasses.replace(d, nproc_per_node=n),
    )
    return dataclasses.replace(loaded, spec=spec)


def world_size(ctx: RunContext) -> int:
    return max(1, ctx.spec.distributed.world or ctx.spec.batch.replicas)


def backend(ctx: RunContext) -> str:
    return ctx.spec.distributed.backend or default_backend(ctx.device)


def runs_on_ranks(ctx: RunContext, step: Step) -> bool:
    # The training may keep a phase in this process (a captured trainer's resume: docs/trainer.md).
    here = getattr(ctx.training, "one_process", ())
    return (
        ctx.spec.distributed.strategy != "none"
        and step.phase in phase_table.on_ranks()
        and step.phase not in here
    )


def group_for(ctx: RunContext) -> RankGroup:
    """The campaign's running group, started (or restarted after a failure) when needed."""
    group: RankGroup | None = ctx.memo.get(GROUP)
    if group is not None and group.alive() and group.spec_sha256 == ctx.loaded.sha256:
        return group
    close_group(ctx)
    world = world_size(ctx)
    d = ctx.spec.distributed
    per_node = world // max(1, d.nnodes)
    # The CPU threads are this node's: shared by this node's ranks.
    threads = max(1, torch.get_num_threads() // per_node) if ctx.device.type == "cpu" else 1
    nodes = Nodes(d.nnodes, per_node, d.rdzv_endpoint, d.join_timeout_s, _task_sha256(ctx))
    # A captured trainer's ranks each run the user's script (model load, tokenisation) before they
    # join: twice what it took the runner, beside the interpreter's start.
    capture_s = float(ctx.memo.get("trainer_capture", {}).get("seconds", 0.0))
    builds = "runs the script up to its train()" if ctx.spec.task.captures_trainer else "builds the task"
    with ctx.saying(f"starting {world} ranks under torchrun: each imports torch and {builds}"):
        group = RankGroup.launch(
            ctx.loaded.path,
            ctx.loaded.sha256,
            ctx.work_dir,
            world,
            backend(ctx),
            ctx.spec.distributed.timeout_s,
            threads,
            check=ctx.check_cancel,
            nodes=nodes,
            start_grace_s=START_GRACE_S + 2 * capture_s,
        )
    ctx.memo[GROUP] = group
    return group


def _task_sha256(ctx: RunContext) -> str:
    sha = ctx.memo.get("task_sha256")
    return sha if sha is not None else task_file_sha256(ctx.loaded)


def close_group(ctx: RunContext, graceful: bool = True) -> None:
    group: RankGroup | None = ctx.memo.pop(GROUP, None)
    if group is not None:
        group.close(graceful=graceful)


def measure_interconnect(ctx: RunContext, size_mb: float, iters: int = 5) -> dict[str, Any]:
    """Start the group for real and all-reduce `size_mb` MiB on it (the stack phase's figure)."""
    t0 = time.perf_counter()
    group = group_for(ctx)
    started = time.perf_counter() - t0
    results = group.run({"op": "allreduce", "mb": size_mb, "iters": iters}, check=ctx.check_cancel)
    per_rank = [results[r]["allreduce"] for r in sorted(results)]
    # Every rank times the same collective; the slowest view of it is the honest one.
    slowest = max(per_rank, key=lambda m: m["time_s"])
    out = slowest | {"group_start_s": round(started, 3), "per_rank_time_s": [m["time_s"] for m in per_rank]}
    if group.nodes.count > 1:
        hosts = sorted({str(i.get("host", "")) for i in group.info.values()})
        loopback = len(hosts) == 1 or group.nodes.host in ("127.0.0.1", "localhost", "::1")
        out |= {
            "nodes": group.nodes.count,
            "per_node": group.nodes.per_node,
            "hosts": hosts,
            "loopback": loopback,
        }
        for link in ("within_node", "across_nodes"):
            views = [results[r][link] for r in sorted(results) if link in results[r]]
            if views:
                out[link] = max(views, key=lambda m: m["time_s"])
            else:
                out[link] = {"note": "one rank per node: nothing to measure within a node"}
    return out


def execute_on_ranks(ctx: RunContext, step: Step, overrides: dict[str, Any]) -> dict[str, Any]:
    """Run one step on every rank and return the merged row; nothing that happens escapes."""
    world = world_size(ctx)
    # The same params the single-process execute shows (ctx.config reads only the keys it knows).
    cfg = ctx.config(step.variant, overrides, as_ranks=True)
    params = cfg.params() | {"device": str(ctx.device), "world_size": world, "backend": backend(ctx)}
    ctx.cancel.clear()
    ctx.emit(PhaseStarted(step=step.key, phase=step.phase, variant=step.variant, params=params))
    started = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    t0 = time.perf_counter()
    command = {
        "op": "step",
        "step": step.key,
        "phase": step.phase,
        "variant": step.variant,
        "overrides": overrides,
    }
    carried: list[str] = []
    group: RankGroup | None = None
    ctx.memo[CURRENT_STEP] = step.key  # a group's start says so on this step's line (ctx.saying)
    try:
        group = group_for(ctx)
        # The rows this group's ranks have not seen: every rank reads the campaign's rows as the
        # runner holds them, whichever group ran the phase that wrote them.
        command["rows"] = ctx.rows[group.rows_sent :]
        results = group.run(command, on_progress=lambda raw: ctx.emit(decode(raw)), check=ctx.check_cancel)
        carried = list(results[0].get("carried", []))
        row = merge_rows(step, results, params, started)
    except Cancelled:
        close_group(ctx, graceful=False)
        row = failed_row(step, params, started, CANCELLED_BY_USER, {}, {}, cancelled=True)
    except GroupFailure as exc:
        close_group(ctx, graceful=False)
        partial = exc.details.pop("rank_results", {})
        causes = exc.details.pop("rank_causes", {})
        row = failed_row(step, params, started, exc.reason, exc.details, partial, causes)
    except Exception as exc:  # the runner's own side failed (a store error): still one row
        close_group(ctx, graceful=False)
        row = failed_row(step, params, started, f"{type(exc).__name__}: {exc}", {}, {})
    if row["verdict"] == FAIL:
        # A failed phase may leave ranks at different points of their collectives: start afresh.
        close_group(ctx, graceful=False)
    row["duration_s"] = round(max(row.get("duration_s", 0.0), 0.0) or time.perf_counter() - t0, 4)
    row["details"]["wall_s"] = round(time.perf_counter() - t0, 4)
    for raw in carried:
        ctx.emit(decode(raw))
    ctx.rows.append(row)
    if group is not None and ctx.memo.get(GROUP) is group:
        group.rows_sent = len(ctx.rows) - 1  # the merged row goes with the next command
    ctx.emit(PhaseFinished(step=step.key, row=row))
    return row


def _peak(memory: dict[str, Any]) -> float:
    return Memory.from_toml(memory).peak() or 0.0  # rows.Memory decides which counter


def rank_entry(rank: int, row: dict[str, Any]) -> dict[str, Any]:
    """One rank's figures in the merged row (what the Gates detail and Counters draw per rank)."""
    memory, details = row.get("memory", {}), row.get("details", {})
    entry: dict[str, Any] = {
        "rank": rank,
        "verdict": row.get("verdict", ""),
        "duration_s": row.get("duration_s", 0.0),
    }
    if "node" in row:
        entry["node"], entry["host"] = row["node"], row.get("host", "")
    if row.get("verdict") != PASS:
        entry["reason"] = str(row.get("reason", ""))
    for key in ("peak_allocated_mb", "peak_reserved_mb", "peak_rss_mb", "nvml_used_mb"):
        if key in memory:
            entry[key] = memory[key]
    for key, name in (
        ("step_time_s", "step_time_s"),
        ("data_wait_share", "data_wait_share"),
        ("rank_state_mb", "state_mb"),
        ("save_s", "save_s"),
        ("written_mb", "written_mb"),
    ):
        if key in details:
            entry[name] = details[key]
    return entry


def merge_rows(
    step: Step, results: dict[int, dict[str, Any]], params: dict[str, Any], started: str
) -> dict[str, Any]:
    """The phase's one row from every rank's row (see the module docstring)."""
    rows: dict[int, dict[str, Any]] = {}
    for r, res in results.items():
        if "row" in res:
            rows[r] = dict(res["row"])
        else:  # the rank's own loop failed outside the phase registry
            rows[r] = {"verdict": FAIL, "reason": res.get("error", "no row"), "memory": {}, "details": {}}
        if len({res.get("node", 0) for res in results.values()}) > 1:
            rows[r] |= {"node": res.get("node", 0), "host": res.get("host", "")}
    worst = max(sorted(rows), key=lambda r: Verdict.read(rows[r].get("verdict")).rank)
    peak_rank = max(sorted(rows), key=lambda r: _peak(rows[r].get("memory", {})))
    base = rows.get(0, rows[worst])
    details = dict(base.get("details", {}))
    verdict = Verdict.read(rows[worst].get("verdict"))
    reason = base.get("reason", "")
    if verdict != base.get("verdict") or (verdict == FAIL and len(rows) > 1):
        reason = f"rank {worst}: {rows[worst].get('reason', '')}"
    for key in ("step_time_s", "step_time_p50_s", "step_time_p90_s", "data_wait_share", "save_s"):
        per = [rows[r]["details"][key] for r in rows if key in rows[r].get("details", {})]
        if per:
            # The ranks step together: the slowest one sets the pace the plan must use.
            details[key] = max(per)
    timed = [r for r in rows if "step_s_mean" in rows[r].get("details", {})]
    if timed:
        # The interval is the slowest rank's: the one whose pace the plan uses.
        slowest = rows[max(timed, key=lambda r: rows[r]["details"]["step_s_mean"])]["details"]
        details |= {k: v for k, v in slowest.items() if k.startswith("step_s_") or k in _PACE_KEYS}
    for key in ("examples_per_s", "tokens_per_s", "written_mb"):
        per = [rows[r]["details"].get(key) for r in rows if key in rows[r].get("details", {})]
        if per:
            details[key] = sum(per)
    details["world_size"] = len(rows)
    details["peak_rank"] = peak_rank
    ranks = [rank_entry(r, rows[r]) for r in sorted(rows)]
    if any("node" in e for e in ranks):
        details["nodes"] = node_figures(ranks)
        if reason.startswith(f"rank {worst}:") and "node" in rows[worst]:
            reason = f"node {rows[worst]['node']} {reason}"
    return phase_row(
        name=step.phase,
        step=step.key,
        variant=step.variant,
        verdict=verdict,
        reason=reason,
        started=started,
        duration_s=max(float(rows[r].get("duration_s", 0.0)) for r in rows),
        params=params | base.get("params", {}) | {"world_size": len(rows)},
        memory=rows[peak_rank].get("memory", {}),
        details=details,
        ranks=ranks,
        # A rank stopped by the cancel stopped the phase: it runs again.
        cancelled=any(rows[r].get("cancelled") is True for r in rows),
    )


def node_figures(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per node: its ranks, worst verdict, highest peak and slowest duration."""
    out = []
    for node in sorted({e["node"] for e in ranks if "node" in e}):
        mine = [e for e in ranks if e.get("node") == node]
        entry: dict[str, Any] = {
            "node": node,
            "host": mine[0].get("host", ""),
            "ranks": [e["rank"] for e in mine],
            "verdict": worst(e.get("verdict") for e in mine).value,
            "duration_s": max(float(e.get("duration_s", 0.0)) for e in mine),
        }
        for key in ("peak_reserved_mb", "peak_rss_mb", "step_time_s", "save_s"):
            per = [e[key] for e in mine if key in e]
            if per:
                entry[key] = max(per)
        out.append(entry)
    return out


def failed_row(
    step: Step,
    params: dict[str, Any],
    started: str,
    reason: str,
    details: dict[str, Any],
    partial: dict[int, dict[str, Any]],
    causes: dict[int, str] | None = None,
    *,
    cancelled: bool = False,
) -> dict[str, Any]:
    """The row of a phase the group could not finish: the failure, named, and what ranks said."""
    ranks = []
    for r in range(int(params.get("world_size", 1))):
        res = partial.get(r)
        cause = (causes or {}).get(r, "")
        if res and "row" in res:
            ranks.append(rank_entry(r, res["row"]) | ({"reason": cause} if cause else {}))
        elif res:
            ranks.append({"rank": r, "verdict": FAIL, "reason": cause or str(res.get("error", ""))})
        else:
            ranks.append({"rank": r, "verdict": FAIL, "reason": cause or "no result"})
    return phase_row(
        name=step.phase,
        step=step.key,
        variant=step.variant,
        verdict=FAIL,
        reason=f"{reason} in {step.phase}",
        started=started,
        params=params,
        memory={},
        details=details,
        ranks=ranks,
        cancelled=cancelled,
    )
