"""The GPU check: what the CPU tests cannot show, proven on a machine with an NVIDIA GPU.

    python scripts/gpu_check.py [--out DIR] [--budget-s 290]

One call, under five minutes on a one-GPU machine whose image already has a CUDA torch. It
installs nothing but the project's pure-Python dependency missing from such images (tomli-w, from
the wheel in scripts/wheels, into a temporary folder), runs the project from this checkout, and
checks what can fail:

- every CUDA row: peak reserved ≤ NVML used, with the gap (the CUDA context and libraries);
- NVML (the UI's probe) sees the campaign's GPU by UUID and finds a CUDA process on it by memory;
- a real CUDA out-of-memory fails its row, and the next variant is measured in the same runner;
- bf16's saved activations are below fp32's, with autocast's weight copies counted apart;
- fp16 steps skipped by the gradient scaler are counted in the steady row;
- resume at the default tolerance (0: bitwise, deterministic algorithms) passes;
- a device-side assert fails its row ("CUDA context poisoned") and the next step runs in a new
  runner; the CLI exits 1;
- eval peaks are not inherited from training (eval_longest and every fit-search point);
- a user's Trainer script through `pilot-tui init --trainer` (scripts/gpu_tasks/trainer_script.py):
  every row passes on CUDA, steady timed on the device with its MFU against the dense peak,
  resume in a new process, a bf16 variant by a fresh capture;
- the campaign under torchrun (R22): ddp on every visible GPU with nccl, an fsdp variant, per-rank
  rows, and the all-reduce when there are several GPUs (needs `--budget-s 540` to be reached
  after the other parts).

Every subprocess has a timeout (killed with its process group); each result is appended to
DIR/results.jsonl the moment it is known, so a hang loses nothing already measured. The records
are copied to DIR. Prints a short table; exits 0 when every check passed, 1 if one failed, 2
without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "campaigns" / "demo.toml"
WHEELS = REPO / "scripts" / "wheels"
POISON_TASK = REPO / "scripts" / "gpu_tasks" / "poison_task.py"
TRAINER_SCRIPT = REPO / "scripts" / "gpu_tasks" / "trainer_script.py"
TRAINER_ASSETS = REPO / "tests" / "data" / "trainer_scripts" / "tiny_assets.py"
MIB = 1024 * 1024
DEVICE = "cuda"

# Seconds each part may take at most (each also stops at the overall budget).
PART_LIMITS = {
    "nvml": 45,
    "machine": 60,
    "poison": 70,
    "demo": 110,
    "trainer": 120,
    "oom": 90,
    "torchrun": 120,
}


class Checks:
    """Results in order; each one written to results.jsonl as soon as it is known."""

    def __init__(self, out: Path) -> None:
        self.rows: list[tuple[str, bool | None, str]] = []
        self.path = out / "results.jsonl"

    def add(self, name: str, ok: bool | None, figure: str = "") -> None:
        self.rows.append((name, ok, figure))
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"check": name, "ok": ok, "figure": figure, "time": time.time()}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        mark = {True: "PASS", False: "FAIL", None: "INFO"}[ok]
        print(f"{mark}  {name}: {figure}", flush=True)

    def table(self) -> str:
        width = max((len(n) for n, _, _ in self.rows), default=10)
        lines = [f"{'check':<{width}}  result  figure", "-" * (width + 40)]
        for name, ok, figure in self.rows:
            mark = {True: "pass", False: "FAIL", None: "info"}[ok]
            lines.append(f"{name:<{width}}  {mark:<6}  {figure[:110]}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- environment


def ensure_pure_deps(scratch: Path) -> dict[str, str]:
    """tomli-w from the carried wheel when the image lacks it; the env for every subprocess."""
    paths = [str(REPO)]
    try:
        import tomli_w  # noqa: F401
    except ImportError:
        site = scratch / "site"
        wheels = sorted(str(w) for w in WHEELS.glob("*.whl"))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--target",
                str(site),
                *wheels,
            ],
            check=True,
            timeout=60,
        )
        sys.path.insert(0, str(site))
        paths.append(str(site))
    sys.path.insert(0, str(REPO))
    old = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, old] if old else paths), PYTHONUNBUFFERED="1")


def run_limited(cmd: list[str], env: dict[str, str], limit: float, log: Path) -> tuple[int | None, float]:
    """Run `cmd` in its own process group; kill the group at `limit`. Output goes to `log`."""
    t0 = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, time.monotonic() - t0


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def run_campaign(
    raw: dict[str, Any], work: Path, env: dict[str, str], limit: float
) -> tuple[int | None, dict, float]:
    """Headless run of a campaign; returns (exit code or None on timeout, record, seconds)."""
    import tomli_w

    name = raw["campaign"]["name"]
    spec = work / f"{name}.toml"
    spec.write_text(tomli_w.dumps(raw))
    cmd = [
        sys.executable,
        "-m",
        "pilot_tui",
        "run",
        str(spec),
        "--headless",
        "--keep-going",  # a failed stack check must not hide the CUDA checks after it
        "--records",
        str(work / "records"),
    ]
    code, seconds = run_limited(cmd, env, limit, work / f"{name}.log")
    records = sorted((work / "records").glob(f"{name}-*.toml"))
    data = tomllib.loads(records[-1].read_text()) if records else {}  # atomic: whole even after a kill
    return code, data, seconds


def rows_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["step"]: r for r in data.get("phases", [])}


def exit_text(code: int | None, seconds: float) -> str:
    return f"timed out after {seconds:.0f} s" if code is None else f"exit {code} in {seconds:.0f} s"


# ---------------------------------------------------------------------------------- the parts


def nvml_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    """In a child process: hold 1 GiB on cuda:0, then ask the UI's NVML probe what it sees."""
    out = work / "nvml.json"
    code, seconds = run_limited(
        [sys.executable, str(Path(__file__).resolve()), "--nvml-child", str(out)],
        env,
        limit,
        work / "nvml.log",
    )
    if not out.is_file():
        checks.add("nvml: UI probe sees the runner's GPU", False, f"no answer ({exit_text(code, seconds)})")
        return
    r = json.loads(out.read_text())
    checks.add(
        "nvml: UI probe opens", not r["error"], r["error"] or f"driver {r['driver']}, {r['gpus']} GPU(s)"
    )
    checks.add(
        "nvml: cuda:0 found by UUID",
        bool(r["uuid_found"]),
        f"uuid {r['uuid']} (CUDA_VISIBLE_DEVICES={r['visible']!r})",
    )
    checks.add(
        "nvml: process found by memory",
        r["matched_pid"] is not None,
        f"matched pid {r['matched_pid']} (own pid {r['pid']}, {'same' if r['matched_pid'] == r['pid'] else 'host pid'}); "
        f"reserved {r['reserved_mb']:.0f} MiB, NVML process {r['process_mb']} MiB",
    )


def nvml_child(out: Path) -> int:
    import torch

    from pilot_tui.runner.environment import gpus
    from pilot_tui.tui.nvml import NvmlProbe, campaign_gpus, match_runner

    hold = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    env = {"device": "cuda:0", "devices": gpus()}
    campaign = campaign_gpus(env)
    probe = NvmlProbe(process_period_s=0.0)
    snap = probe.sample()
    probe.close()
    uuid = next(iter(campaign), "")
    gpu = next((g for g in snap.gpus if g.uuid == uuid), None)
    reserved = torch.cuda.memory_reserved(0) / MIB
    procs = gpu.processes if gpu is not None and gpu.processes else ()
    matched = match_runner(procs, reserved) if procs else None
    mine = next((p for p in procs if p.pid == matched), None)
    out.write_text(
        json.dumps(
            {
                "error": snap.error,
                "driver": snap.driver,
                "gpus": len(snap.gpus),
                "uuid": uuid,
                "uuid_found": gpu is not None,
                "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "pid": os.getpid(),
                "matched_pid": matched,
                "reserved_mb": reserved,
                "process_mb": round(mine.used_mb, 1) if mine and mine.used_mb is not None else None,
            }
        )
    )
    del hold
    return 0


def row_checks(checks: Checks, label: str, data: dict[str, Any]) -> None:
    """Per CUDA row: peak reserved ≤ NVML used; the gap is the context (and other processes)."""
    measured = [r for r in data.get("phases", []) if "peak_reserved_mb" in r.get("memory", {})]
    with_nvml = [r for r in measured if "nvml_used_mb" in r["memory"]]
    bad = [r["step"] for r in with_nvml if r["memory"]["reserved_mb"] > r["memory"]["nvml_used_mb"]]
    gaps = [r["memory"]["nvml_used_mb"] - r["memory"]["reserved_mb"] for r in with_nvml]
    figure = (
        f"{len(with_nvml)}/{len(measured)} rows with NVML; gap {min(gaps):.0f}..{max(gaps):.0f} MiB"
        if gaps
        else f"{len(measured)} CUDA rows, none with NVML"
    )
    checks.add(
        f"{label}: reserved ≤ NVML used",
        bool(with_nvml) and not bad,
        figure + (f"; over: {bad}" if bad else ""),
    )


def demo_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    raw = merge(
        tomllib.loads(DEMO.read_text()),
        {
            "campaign": {"name": "gpu-demo"},
            # Wider than the demo: weights, gradients and moments in the allocator's large
            # blocks, so a peak that inherits a reserve shows (the tiny demo fits in 2 MiB ones).
            "task": {
                "options": {"n_conversations": 240, "seed": 0, "d_model": 256, "n_layers": 4, "n_heads": 8}
            },
            "batch": {"device": DEVICE},
            "phases": {"steady_updates": 20},
            "fit_search": {"microbatches": [2, 4, 8]},
        },
    )
    raw["resume"].pop("tolerance", None)  # the default: bitwise
    raw.pop("lr_board", None)  # LR runs prove nothing CUDA-specific here and cost a minute
    raw["variants"] = [
        {"id": "bf16", "precision": "bf16"},
        {"id": "fp16", "precision": "fp16"},
        {"id": "mb1", "microbatch": 1},
    ]
    code, data, seconds = run_campaign(raw, work, env, limit)
    rows = rows_of(data)
    checks.add(
        "demo: cuda campaign runs",
        code in (0, 1) and bool(rows),
        f"{exit_text(code, seconds)}, {len(rows)} rows",
    )
    fails = [f"{k}: {r['reason'][:60]}" for k, r in rows.items() if r["verdict"] == "fail"]
    checks.add(
        "demo: no failed gate",
        code == 0 and not fails,
        "; ".join(fails)
        or ("all rows pass/warn" if code == 0 else f"no failed row, but {exit_text(code, seconds)}"),
    )
    row_checks(checks, "demo", data)
    baseline_flat(checks, "demo", rows, ["first_step@bf16", "first_step@fp16", "first_step@mb1"])
    estimate_vs_measured(checks, data)
    variants = {v["id"]: v for v in data.get("variants", [])}
    ctrl, bf16 = variants.get("control", {}), variants.get("bf16", {})
    a, b = ctrl.get("saved_activations_mb"), bf16.get("saved_activations_mb")
    checks.add(
        "demo: bf16 activation ratio < 1",
        a is not None and b is not None and b < a,
        f"bf16 {b} MiB vs fp32 {a} MiB; weight casts apart {bf16.get('saved_weight_casts_mb')} MiB",
    )
    steady16 = rows.get("steady@fp16", {}).get("details", {})
    first16 = rows.get("first_step@fp16", {}).get("details", {})
    checks.add(
        "demo: fp16 scaler skips recorded",
        "scaler_skipped_updates" in steady16,
        f"steady {steady16.get('scaler_skipped_updates')} skipped, first_step {first16.get('scaler_skipped_updates')}, "
        f"scale {steady16.get('grad_scale')}",
    )
    resume = rows.get("resume", {})
    d = resume.get("details", {})
    checks.add(
        "demo: resume at the default tolerance",
        resume.get("verdict") == "pass",
        f"{resume.get('reason', 'not run')[:70]} · {d.get('comparison', '')[:80]}",
    )
    final = rows.get("final", {})
    checks.add(
        "demo: final reload", final.get("verdict") in ("pass", "warn"), final.get("reason", "not run")[:100]
    )
    steady, ev = rows.get("steady", {}).get("memory", {}), rows.get("eval_longest", {}).get("memory", {})
    checks.add(
        "demo: eval_longest starts below steady's reserve",
        bool(ev)
        and bool(steady)
        and ev.get("baseline_reserved_mb", 1e18) < steady.get("peak_reserved_mb", 0),
        f"eval baseline reserved {ev.get('baseline_reserved_mb')} / peak {ev.get('peak_reserved_mb')} MiB; "
        f"steady peak {steady.get('peak_reserved_mb')} MiB",
    )
    points = [p for p in data.get("fit", {}).get("points", []) if p.get("status") == "fits"]
    inherited = [p["microbatch"] for p in points if p["eval_peak_mb"] >= p["train_peak_mb"]]
    checks.add(
        "demo: fit points' eval peak below their train peak",
        bool(points) and not inherited,
        "; ".join(f"mb{p['microbatch']} {p['eval_peak_mb']:.0f}<{p['train_peak_mb']:.0f}" for p in points)
        + (f"; inherited: {inherited}" if inherited else ""),
    )
    fit_row = rows.get("fit_search", {}).get("details", {})
    checks.add(
        "demo: fit search parked the control",
        "control" in fit_row.get("parked_states", []),
        str(fit_row.get("parked_states")),
    )
    envr = data.get("environment", {})
    keys = ("tf32_matmul", "cudnn_benchmark", "deterministic_algorithms", "env_vars")
    dev = (envr.get("devices") or [{}])[0]
    checks.add(
        "demo: environment has numerics and device ids",
        all(k in envr for k in keys) and bool(dev.get("uuid")) and bool(dev.get("pci_bus_id")),
        f"tf32 {envr.get('tf32_matmul')} · uuid {dev.get('uuid', '')[:18]} · pci {dev.get('pci_bus_id')} · "
        f"CUBLAS {envr.get('env_vars', {}).get('CUBLAS_WORKSPACE_CONFIG')}",
    )


def estimate_vs_measured(checks: Checks, data: dict[str, Any]) -> None:
    """The fake-tensor estimate of every demo configuration against its measured peak allocated
    (scripts/gpu_check_estimate.py: one line each, a check per ratio measured at the same length)."""
    from gpu_check_estimate import report_estimate  # beside this script

    def check(ok: bool, what: str) -> bool:
        checks.add(what, ok)
        return ok

    report_estimate(data, check)


def baseline_flat(checks: Checks, label: str, rows: dict[str, dict[str, Any]], steps: list[str]) -> None:
    """Each configuration starts from a clean GPU: the allocated baseline before each of these
    first steps (memory.baseline_allocated_mb) within 64 MiB of the lowest (a variant's state,
    a leaked graph or an OOM's frames would add hundreds of MiB to tens of GiB)."""
    found = {s: rows.get(s, {}).get("memory", {}).get("baseline_allocated_mb") for s in steps}
    known = {s: v for s, v in found.items() if isinstance(v, int | float)}
    spread = max(known.values()) - min(known.values()) if len(known) >= 2 else None
    checks.add(
        f"{label}: allocated baseline flat across variants",
        spread is not None and spread <= 64,
        ", ".join(
            f"{s} {v:.0f} MiB"
            if isinstance(v, int | float)
            else f"{s} {'no CUDA figure' if s in rows else 'not run'}"
            for s, v in found.items()
        ),
    )


def machine_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    """`pilot-tui machine` on this box: GEMM and memory bandwidth against the datasheet per GPU,
    the host's disks and /dev/shm (docs/machine.md)."""
    import tomli_w  # ensured by ensure_pure_deps

    raw = merge(
        tomllib.loads(DEMO.read_text()), {"batch": {"device": DEVICE}, "campaign": {"name": "gpu-machine"}}
    )
    path = work / "machine.toml"
    path.write_text(tomli_w.dumps(raw))
    log = work / "machine.log"
    code, seconds = run_limited(
        [sys.executable, "-m", "pilot_tui", "machine", str(path), "--json"], env, limit, log
    )
    try:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        start = next(i for i, ln in enumerate(lines) if ln.startswith("{"))
        result = json.loads("\n".join(lines[start:]))
    except (StopIteration, ValueError):
        checks.add("machine: the check ran", False, exit_text(code, seconds))
        return
    checks.add("machine: the check ran", code in (0, 1), f"{exit_text(code, seconds)}: {result['verdict']}")
    details = result.get("details", {})
    gpus = details.get("gpus", [])
    for g in gpus:
        gemm, mem = g.get("gemm_tflops"), g.get("memory_gbps")
        checks.add(
            f"machine: GPU {g.get('index')} measured",
            isinstance(gemm, int | float) and isinstance(mem, int | float),
            f"{g.get('name', '?')}: GEMM {gemm} TFLOP/s, memory {mem} GB/s",
        )
    verdicts = {c["name"]: c["verdict"] for c in details.get("checks", [])}
    checks.add("machine: no failed check", "fail" not in verdicts.values(), str(verdicts)[:110])
    if DEVICE == "cpu":
        checks.add("machine: CPU figures", "cpu_gemm_gflops" in details, str(details.get("cpu_gemm_gflops")))


def oom_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    # 400M parameters and 16384 sequences a microbatch: hundreds of GiB of activations, far past
    # any card: a real CUDA out-of-memory, which must fail its row and leave the runner working.
    raw = merge(
        tomllib.loads(DEMO.read_text()),
        {
            "campaign": {"name": "gpu-oom"},
            "task": {
                "options": {
                    "n_conversations": 12000,
                    "seed": 0,
                    "d_model": 2048,
                    "n_layers": 8,
                    "n_heads": 16,
                }
            },
            "batch": {"device": DEVICE},
            "phases": {
                "steady_updates": 3,
                "skip": ["stack", "inspect", "split", "overfit", "save", "export", "resume", "final"],
            },
        },
    )
    raw.pop("lr_board", None)
    raw["variants"] = [{"id": "huge", "microbatch": 16384, "accumulation": 1}, {"id": "mb8", "microbatch": 8}]
    code, data, seconds = run_campaign(raw, work, env, limit)
    rows = rows_of(data)
    huge = rows.get("first_step@huge", {})
    checks.add(
        "oom: real CUDA OOM fails its row",
        huge.get("verdict") == "fail" and "out of memory" in huge.get("reason", ""),
        f"{exit_text(code, seconds)}; {huge.get('reason', 'not run')[:80]}",
    )
    per_phase = huge.get("memory", {}).get("num_ooms")
    checks.add(
        "oom: per-phase num_ooms",
        (per_phase or 0) >= 1 and rows.get("steady@mb8", {}).get("memory", {}).get("num_ooms") == 0,
        f"OOM row {per_phase}, next variant's steady {rows.get('steady@mb8', {}).get('memory', {}).get('num_ooms')}, "
        f"runner lifetime {huge.get('details', {}).get('runner_num_ooms')}",
    )
    baseline_flat(checks, "oom", rows, ["first_step", "first_step@mb8"])
    after = [rows.get(k, {}).get("verdict") for k in ("first_step@mb8", "steady@mb8", "eval_longest@mb8")]
    checks.add(
        "oom: next variant measured after the OOM", all(v in ("pass", "warn") for v in after), str(after)
    )
    row_checks(checks, "oom", data)


def poison_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    raw = merge(
        tomllib.loads(DEMO.read_text()),
        {
            "campaign": {"name": "gpu-poison"},
            "batch": {"device": DEVICE},
            "phases": {
                "steady_updates": 5,
                "skip": ["stack", "inspect", "split", "overfit", "save", "export", "resume", "final"],
            },
        },
    )
    raw["task"] = {
        "file": str(POISON_TASK),
        "function": "make_task",
        "options": {"n_conversations": 120, "seed": 0, "marker": str(work / "poisoned-by-pid")},
        "group_key": "conversation",
        "supervise_prompt": False,
    }
    raw.pop("lr_board", None)
    raw.pop("variants", None)
    code, data, seconds = run_campaign(raw, work, env, limit)
    rows = rows_of(data)
    first = rows.get("first_step", {})
    checks.add(
        "poison: device-side assert fails its row",
        first.get("verdict") == "fail" and first.get("reason", "").startswith("CUDA context poisoned"),
        first.get("reason", "not run")[:110],
    )
    later = [rows.get(k, {}).get("verdict") for k in ("steady", "eval_longest")]
    checks.add(
        "poison: next steps run in a new runner",
        all(v in ("pass", "warn") for v in later),
        f"steady, eval_longest: {later}",
    )
    checks.add("poison: CLI exits 1, never 0", code == 1, exit_text(code, seconds))


def trainer_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    """A user's transformers Trainer script (scripts/gpu_tasks/trainer_script.py: no `datasets`,
    which the image lacks) on a tiny local Llama, through `pilot-tui init --trainer` and a
    headless run: the captured trainer's rows on CUDA, steady timed on the device with its MFU
    against the GPU's dense peak, resume in a new process, a bf16 variant by a fresh capture."""

    sys.path.insert(0, str(TRAINER_ASSETS.parent))
    import tiny_assets  # tests/data/trainer_scripts: a tiny Llama and its data, built locally

    tiny = tiny_assets.build(work / "tiny")
    spec = work / "gpu-trainer.toml"
    env = dict(env, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    args = [
        "--model",
        str(tiny.model),
        "--data",
        str(tiny.prompt_completion),
        "--output_dir",
        str(work / "out"),
    ]
    code, seconds = run_limited(
        [
            sys.executable,
            "-m",
            "pilot_tui",
            "init",
            "--trainer",
            str(TRAINER_SCRIPT),
            "--out",
            str(spec),
            "--",
            *args,
        ],
        env,
        min(60.0, limit),
        work / "gpu-trainer-init.log",
    )
    if code != 0 or not spec.is_file():
        checks.add("trainer: init wrote the campaign", False, exit_text(code, seconds))
        return
    raw = tomllib.loads(spec.read_text())
    raw["campaign"]["name"] = "gpu-trainer"
    # Fixed when the script builds its trainer: a fresh capture, with accelerate's own variable.
    raw.setdefault("variants", []).append({"id": "bf16", "env": {"ACCELERATE_MIXED_PRECISION": "bf16"}})
    code, data, seconds = run_campaign(raw, work, env, max(10.0, limit - seconds))
    rows = rows_of(data)
    fails = [f"{k}: {r['reason'][:60]}" for k, r in rows.items() if r["verdict"] == "fail"]
    checks.add(
        "trainer: campaign passes",
        code == 0 and bool(rows) and not fails,
        "; ".join(fails) or f"{exit_text(code, seconds)}, {len(rows)} rows",
    )
    checks.add(
        "trainer: runs on the GPU",
        data.get("environment", {}).get("device", "").startswith("cuda"),
        str(data.get("environment", {}).get("device")),
    )
    d = rows.get("steady", {}).get("details", {})
    from pilot_tui.runner.subject.trainer.steady_gate import CLOCK_CUDA

    checks.add(
        "trainer: steady timed on the device (synchronised each update)",
        d.get("timing_clock") == CLOCK_CUDA,
        f"clock {d.get('timing_clock')}; {rows.get('steady', {}).get('reason', 'not run')[:80]}",
    )
    found = d.get("mfu", {})
    checks.add(
        "trainer: MFU against the GPU's dense peak",
        isinstance(found.get("mfu"), int | float) and bool(found.get("peak")),
        f"MFU {found.get('mfu')} of {found.get('peak')} ({found.get('why', '')})",
    )
    row_checks(checks, "trainer", data)
    resume = rows.get("resume", {})
    checks.add(
        "trainer: resume in a new process",
        resume.get("verdict") == "pass",
        resume.get("reason", "not run")[:110],
    )
    bf16 = rows.get("steady@bf16", {})
    checks.add(
        "trainer: bf16 by a fresh capture",
        bf16.get("verdict") in ("pass", "warn"),
        bf16.get("reason", "not run")[:110],
    )


# ---------------------------------------------------------------------------------- main


def torchrun_part(checks: Checks, env: dict[str, str], limit: float, work: Path) -> None:
    """The campaign through the torchrun path (R22): ddp on every visible GPU (nccl), fsdp as a variant."""
    raw = merge(
        tomllib.loads(DEMO.read_text()),
        {
            "campaign": {"name": "gpu-torchrun"},
            "batch": {"device": DEVICE},
            "phases": {"steady_updates": 20, "skip": ["inspect", "split", "overfit"]},
            "distributed": {"strategy": "ddp", "timeout_s": 60},
        },
    )
    raw["batch"].pop("replicas", None)  # the world size: every visible GPU
    raw.pop("lr_board", None)
    raw["variants"] = [{"id": "fsdp", "strategy": "fsdp"}]
    code, data, seconds = run_campaign(raw, work, env, limit)
    rows = rows_of(data)
    fails = [f"{k}: {r['reason'][:60]}" for k, r in rows.items() if r["verdict"] == "fail"]
    checks.add(
        "torchrun: campaign passes", code == 0 and not fails, "; ".join(fails) or exit_text(code, seconds)
    )
    ranked = [k for k, r in rows.items() if r.get("ranks")]
    checks.add("torchrun: rows with per-rank figures", len(ranked) >= 9, ", ".join(ranked))
    steady = rows.get("steady", {})
    per_rank = [
        (r.get("rank"), r.get("peak_reserved_mb"), r.get("nvml_used_mb"), r.get("step_time_s"))
        for r in steady.get("ranks", [])
    ]
    ok = bool(per_rank) and all((p or 0) > 0 for _, p, _, _ in per_rank)
    checks.add("torchrun: steady per rank (rank, peak reserved, NVML used, step s)", ok, str(per_rank))
    ic = rows.get("stack", {}).get("details", {}).get("interconnect")
    checks.add("torchrun: all-reduce", None, str(ic) if ic else "one rank: no all-reduce measured")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=REPO / "gpu_check_out", help="results and records go here"
    )
    parser.add_argument("--budget-s", type=float, default=290.0, help="stop starting parts after this")
    parser.add_argument("--nvml-child", type=Path, help=argparse.SUPPRESS)
    # Rehearsal of this script's own logic on a CPU machine (the checks then fail, by design).
    parser.add_argument("--rehearse-on-cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nvml_child:
        sys.path.insert(0, str(REPO))
        return nvml_child(args.nvml_child)
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.jsonl").unlink(missing_ok=True)
    checks = Checks(args.out)
    import torch

    global DEVICE
    if args.rehearse_on_cpu:
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    else:
        p = torch.cuda.get_device_properties(0)
        checks.add(
            "machine",
            None,
            f"torch {torch.__version__} · CUDA {torch.version.cuda} · {p.name} · {p.total_memory / 2**30:.0f} GiB · "
            f"capability {p.major}.{p.minor}",
        )
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        env = ensure_pure_deps(work)
        parts = (
            ("nvml", nvml_part),
            ("machine", machine_part),
            ("poison", poison_part),
            ("demo", demo_part),
            ("trainer", trainer_part),
            ("oom", oom_part),
            ("torchrun", torchrun_part),
        )
        if DEVICE == "cpu":  # no CUDA to hold, and a 400M-parameter model would swamp the host
            parts = tuple(p for p in parts if p[0] in ("machine", "poison", "demo", "trainer"))
        for name, part in parts:
            left = deadline - time.monotonic()
            if left < 10:
                checks.add(f"{name}: not run", False, "the time budget ran out")
                continue
            try:
                part(checks, env, min(PART_LIMITS[name], left), work)
            except Exception as exc:  # one broken part must not hide the others
                checks.add(f"{name}: check script error", False, f"{type(exc).__name__}: {exc}"[:110])
        # Few files (the device tool brings back at most 8): the records, and one file of logs.
        for record in (work / "records").glob("*.toml"):
            shutil.copy(record, args.out / record.name)
        with (args.out / "logs.txt").open("w", encoding="utf-8") as logs:
            for log in sorted(work.glob("*.log")):
                logs.write(f"===== {log.name}\n{log.read_text(errors='replace')[-20000:]}\n")
    print("\n" + checks.table(), flush=True)
    failed = sum(1 for _, ok, _ in checks.rows if ok is False)
    print(f"\n{sum(1 for _, ok, _ in checks.rows if ok)} passed, {failed} failed · results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
