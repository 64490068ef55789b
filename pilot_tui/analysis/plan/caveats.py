"""What the plan's figures assume, and the caveats a renter must read before them.

Kept apart from the sheet and the package: each adds to the plan without changing how it is
computed.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...core.rows import PhaseRow
from ...core.verdict import PASS
from .inputs import Environment, Facts, number_at, step_key, text
from .package import PackagePlan
from .rental import NCCL_DEFAULT_TIMEOUT_S, SAVE_TIMEOUT_SHARE
from .sheet import ChoiceSheet

# Above this 1-minute load average per core the timed loop shared the CPU: its step times are not
# the machine's (identical pilots on a busy 2-core machine predicted 0.8 to 4.0 h).
BUSY_LOAD_PER_CORE = 1.0
CPU_CAVEAT = (
    "measured on the CPU: times and memory are this CPU's, not a GPU's; "
    "re-run the pilot on the rented GPU before trusting the days"
)


def assumptions(facts: Facts, sheet: ChoiceSheet) -> list[str]:
    """The campaign-wide assumptions of the package's figures (each estimate adds its own notes)."""
    spec = facts.spec
    out = []
    for phase in sheet.untested:
        out.append(f"{phase} did not run: the plan assumes it works — run it before renting for days")
    for phase in sheet.skipped_checks:
        out.append(f"{phase} is skipped by the campaign (phases.skip): the plan assumes it works")
    replicas = sheet.replicas or 1
    if spec.plan.gpus > replicas:
        out.append(
            f"plan.gpus = {spec.plan.gpus} but the pilot measured {replicas} replica(s): the estimate is for "
            f"{replicas} GPU(s); no speed-up from more GPUs is assumed until it is measured"
        )
    if replicas > 1:
        # R22: the step time is the slowest rank's, measured on `replicas` ranks with their
        # collectives in it; never one GPU's time divided by the GPU count.
        out.append(
            f"step times were measured on {replicas} ranks under torchrun ({spec.distributed.strategy}), "
            "slowest rank, collectives included: no linear speed-up is assumed"
        )
    if facts.environment.device.startswith("cpu"):
        out.append(
            "step times were measured on the CPU: re-run the pilot on the rented GPU before trusting the days"
        )
    note = tf32_note(facts.environment, facts.rows.values())
    if note:
        out.append(note)
    out.append(
        "the full dataset has the pilot's sequence lengths; evaluation is timed on the longest "
        "validation batch, so its reserve is an upper bound"
    )
    return out


def tf32_note(environment: Environment, rows: Iterable[PhaseRow]) -> str | None:
    """A line when fp32 steps were timed on a GPU with TF32 off (the [environment] says so).

    TF32 makes fp32 matmuls several times faster on Ampere and later: a plan timed without it
    is pessimistic for a run that turns it on, and the reader must know which one it is.
    """
    if not environment.device.startswith("cuda") or environment.tf32_matmul:
        return None
    timed = sorted(
        r.key for r in rows if r.name in ("first_step", "steady") and text(r.params, "precision") == "fp32"
    )
    if not timed:
        return None
    return (
        f"fp32 steps ({', '.join(timed[:3])}{', …' if len(timed) > 3 else ''}) were timed with TF32 off "
        "(torch.backends.cuda.matmul.allow_tf32 = False): a run that enables TF32 is faster than planned"
    )


def busy_machine(steady: PhaseRow) -> str:
    """A caveat when the machine was too busy during the timed loop for its times to be trusted."""
    load = number_at(steady.details, "load_avg_1m")
    cores = int(steady.detail("cpu_count"))
    threads = int(steady.detail("torch_threads"))
    if load is None or cores < 1:
        return ""
    if load <= BUSY_LOAD_PER_CORE * cores:
        return ""
    return (
        f"the machine was busy while steady was timed (load average {load:.1f} on {cores} cores): "
        "its step times are not this machine's; re-run the pilot on an idle machine"
        + (f" (torch used {threads} thread(s))" if threads else "")
    )


# A host-memory slope is read only past this much growth over steady: less is the allocator's
# caches settling, not a leak (the demo grows 0–3 MiB).
HOST_GROWTH_FLOOR_MB = 16.0


def host_memory_runs_out(steady: PhaseRow, run_hours: float) -> str:
    """The hour the host's memory fills at the slope steady measured (the trainer and its loader
    workers), said when that comes before the run's end."""
    rss = steady.details.get("host_rss")
    if not isinstance(rss, dict):
        return ""
    slope, last = number_at(rss, "slope_mb_per_update"), number_at(rss, "last_mb")
    total, between = number_at(rss, "machine_total_mb"), number_at(rss, "updates_between")
    step_s = number_at(steady.details, "step_s_mean") or number_at(steady.details, "step_time_s")
    if None in (slope, last, total, between, step_s) or not slope or slope <= 0 or not step_s:
        return ""
    if slope * between < HOST_GROWTH_FLOOR_MB:
        return ""
    hours = (total - last) / slope * step_s / 3600
    if hours >= run_hours:
        return ""
    processes = int(number_at(rss, "processes") or 1)
    who = "the trainer" + (f" and its {processes - 1} loader worker(s)" if processes > 1 else "")
    return (
        f"host memory: {who} grew {slope:.2f} MiB per update over steady ({between:.0f} updates, "
        f"{rss.get('first_mb', 0):.0f} → {last:.0f} MiB): at {step_s * 1e3:.1f} ms per update this "
        f"machine's {total / 1024:.1f} GiB is full after ~{hours:.1f} h, before the run's {run_hours:.1f} h "
        "end — a leak in the loader or the loop (a list that keeps every batch, a cache per worker)"
    )


# Reserved − allocated growth below this over steady is the allocator settling, not a trend.
FRAGMENTATION_FLOOR_MB = 64.0


def fragmentation_runs_out(steady: PhaseRow, run_updates: int) -> str:
    """The update where the caching allocator's unused blocks, growing at the slope steady
    measured, take reserved memory to the GPU's, said when that comes before the run's end."""
    frag = steady.details.get("fragmentation")
    if not isinstance(frag, dict):
        return ""
    slope, reserved = number_at(frag, "slope_mb_per_update"), number_at(frag, "reserved_last_mb")
    total, between = number_at(frag, "gpu_total_mb"), number_at(frag, "updates_between")
    if None in (slope, reserved, total, between) or not slope or slope <= 0:
        return ""
    if slope * between < FRAGMENTATION_FLOOR_MB:
        return ""
    left = (total - reserved) / slope
    if left >= run_updates:
        return ""
    return (
        f"fragmentation: reserved − allocated grew {slope:.2f} MiB per update over steady "
        f"({frag.get('gap_first_mb', 0):.0f} → {frag.get('gap_last_mb', 0):.0f} MiB): reserved reaches this "
        f"GPU's {total / 1024:.0f} GiB after ~{left:,.0f} more updates, before the run's {run_updates:,} — "
        "an out-of-memory days in; try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as a variant "
        "(an env variant), or fewer distinct shapes (pad to a few lengths)"
    )


def preprocessing_timeout(facts: Facts) -> str:
    """On several ranks: the script's work before train() (model load, tokenisation, packing),
    scaled from the pilot's rows to the full dataset, against the collective timeout — rank 0
    preparing the data while the other ranks wait at their first collective (row 51)."""
    spec, load = facts.spec, facts.row("load")
    if load is None or (spec.distributed.strategy == "none" and spec.plan.gpus <= 1):
        return ""
    before, rows = number_at(load.details, "capture_s"), number_at(load.details, "train_examples")
    full = spec.plan.dataset_size
    if not before or not rows or full <= rows:
        return ""
    projected = before * full / rows
    if spec.distributed.strategy != "none":
        timeout, source = spec.distributed.timeout_s, "[distributed] timeout_s"
    else:
        timeout, source = NCCL_DEFAULT_TIMEOUT_S, "NCCL's default process-group timeout"
    if projected <= SAVE_TIMEOUT_SHARE * timeout:
        return ""
    return (
        f"preprocessing: everything before train() took {before:.3g} s for the pilot's {rows:,.0f} rows "
        f"(model load included: an upper bound); the full {full:,} rows take ~{projected:,.0f} s, "
        f"{projected / timeout:.0%} of the {timeout:g} s collective timeout ({source}) — rank 0 preparing "
        "them while the other ranks wait at their first collective times out: preprocess once before the "
        "launch (the datasets cache, main_process_first) or raise the timeout"
    )


def caveats(
    facts: Facts, sheet: ChoiceSheet, package: PackagePlan, provisional: str | None
) -> tuple[str, ...]:
    """What a renter reads first: provisional, CPU-measured, what the memory figure is, busy machine."""
    out: list[str] = [provisional] if provisional else []
    if sheet.device.startswith("cpu"):
        out.append(CPU_CAVEAT)
    out.append(f"memory: {sheet.memory_caption}")
    space, timeout = package.disk, package.save_timeout
    if space is not None and space.status != PASS:
        out.append(f"disk ({space.status}): {space.reason} in {space.checkpoint_dir}")
    if timeout is not None and timeout.status != PASS:
        out.append(f"save ({timeout.status}): {timeout.reason}")
    prepared = preprocessing_timeout(facts)
    if prepared:
        out.append(prepared)
    for run in package.order:
        steady = facts.rows.get(step_key("steady", run.id))
        if steady is None:
            continue
        busy = busy_machine(steady)
        if busy and busy not in out:
            out.append(busy)
        full = host_memory_runs_out(steady, run.total_s / 3600)
        if full and full not in out:
            out.append(f"{run.id}: {full}")
        fragmented = fragmentation_runs_out(steady, run.updates)
        if fragmented:
            out.append(f"{run.id}: {fragmented}")
        threads = steady.details.get("torch_threads")
        if isinstance(threads, int):
            cores = text(steady.details, "cpu_count", "?")
            line = (
                f"step times hold at the pilot's torch thread count ({threads} thread{'s' * (threads != 1)} "
                f"on {cores} cores): another thread count or other load changes them"
            )
            if line not in out:  # one line per distinct count, not one per configuration
                out.append(line)
    return tuple(out)
