"""`pilot-tui machine [CAMPAIGN]`: the machine check alone, printed figure by figure.

The view process checks the input (one line, exit 2) and starts the runner side's check in a
process of its own (`python -m pilot_tui.runner.machine`), so it never imports torch.
Exit codes: 0 pass or warn, 1 fail, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..core.launch import module_command
from ..core.spec import SpecError, load_spec
from ..core.text import one_line

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "machine", help="check this machine: disks, /dev/shm, cores, CPU or GPU speed, links between GPUs"
    )
    p.add_argument(
        "campaign", type=Path, nargs="?", help="campaign spec (TOML): its loader, batch and folders"
    )
    p.add_argument("--records", type=Path, help="folder for records (default: <campaign dir>/records)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


# While the check runs (torch's import, then seconds of measuring; minutes on an 8-GPU box): a
# line redrawn every 2 s on a terminal, a line every 15 s in a log.
BEAT_TTY_S, BEAT_LOG_S = 2.0, 15.0


def _measured(cmd: list[str], err: TextIO, beat_s: float | None) -> subprocess.CompletedProcess[str]:
    """`cmd` run to its end, saying on `err` how long it has been measuring."""
    tty = err.isatty()
    period = beat_s if beat_s is not None else (BEAT_TTY_S if tty else BEAT_LOG_S)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0, said = time.monotonic(), False
    while True:
        try:
            out, error = proc.communicate(timeout=period)
            break
        except subprocess.TimeoutExpired:
            line = f"… measuring this machine: its disks, then its CPU or every GPU ({time.monotonic() - t0:.0f} s)"
            err.write(f"\r\033[K{line}" if tty else f"{line}\n")
            err.flush()
            said = True
    if said and tty:
        err.write("\r\033[K")
        err.flush()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, error)


def run_machine(args: argparse.Namespace, err: TextIO | None = None, beat_s: float | None = None) -> int:
    err = err or sys.stderr
    request: dict[str, Any] = {}
    if args.campaign is not None:
        try:
            load_spec(args.campaign)  # a bad spec is one line here, before any subprocess
        except SpecError as exc:
            print(f"pilot-tui: error: {one_line(exc)}", file=err)
            return EXIT_BAD_INPUT
        request["campaign"] = str(args.campaign.resolve())
        if args.records:
            request["records"] = str(args.records.resolve())
    proc = _measured(module_command("pilot_tui.runner.machine", [json.dumps(request)]), err, beat_s)
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines()
        print(
            one_line(said[-1])
            if said
            else f"pilot-tui: error: the machine check ended with code {proc.returncode}",
            file=err,
        )
        return EXIT_BAD_INPUT if proc.returncode == EXIT_BAD_INPUT else EXIT_FAILED
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=2) if args.json else "\n".join(report_lines(result)))
    return EXIT_FAILED if result["verdict"] == "fail" else EXIT_OK


def report_lines(result: dict[str, Any]) -> list[str]:
    """The verdict, then each figure on its line, then each check's sentence."""
    d = result["details"]
    lines = [f"machine {result['verdict']}: {result['reason']}"]
    lines.append(
        f"  host {d.get('host', '')}: {d['cores']} cores, {d['loader_workers']} loader workers × "
        f"prefetch {d['prefetch_factor']}, {d['ranks']} rank(s)"
    )
    shm = d.get("shm_free_bytes")
    batch = d.get("largest_batch_bytes")
    lines.append(f"  /dev/shm {shm / 2**30:.3g} GiB free" if shm is not None else "  /dev/shm: not readable")
    lines[-1] += (
        f"; largest batch {batch / 2**20:.3g} MiB"
        if batch is not None
        else (
            f"; largest batch not known ({d.get('largest_batch_unknown') or 'no campaign to read it from'})"
        )
    )
    for loc in d["locations"]:
        speed = (
            f"write {loc['write_gbps']:.3g} GB/s"
            if loc.get("write_gbps") is not None
            else "write not measured"
        )
        need = (
            f"needs {loc['need_gib']:.3g} GiB ({loc['need']})"
            if loc.get("need_gib") is not None
            else loc["need"]
        )
        lines.append(f"  {loc['role']:<18} {loc['path']}: {loc['free_gib']:.4g} GiB free, {speed}; {need}")
    if "cpu_gemm_gflops" in d:
        lines.append(
            f"  CPU GEMM fp32 {d['cpu_gemm_gflops']:.4g} GFLOP/s, memory copy {d['cpu_memory_gbps']:.3g} GB/s "
            f"({d['cpu_note']})"
        )
    for g in d.get("gpus", []):
        gemm = f"{g['gemm_tflops']:.4g} TFLOP/s" if g.get("gemm_tflops") is not None else "GEMM not measured"
        mem = f", memory {g['memory_gbps']:.4g} GB/s" if g.get("memory_gbps") is not None else ""
        lines.append(f"  GPU {g['index']} {g['name']} {g.get('uuid', '')}: {gemm}{mem}")
    for c in d.get("checks", []):
        lines.append(f"  [{c['verdict']}] {c['message']}")
    return [one_line(line, 2000) for line in lines]
