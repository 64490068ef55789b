"""`pilot-tui estimate (CAMPAIGN.toml | --model DIR) [flags]`: fits / does not fit, per configuration.

The view process validates the input (one line, exit 2) and starts the runner side's estimate in
a subprocess (`python -m pilot_tui.runner.memory.estimate`), so it never imports torch itself.
Exit codes: 0 the control fits, 1 it does not (or cannot be estimated), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..analysis import memory_estimate as est
from ..core.launch import module_command
from ..core.spec import PRECISIONS, STRATEGIES, SpecError, load_spec

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadEstimateInput(Exception):
    """A flag or path that cannot be estimated; one line."""


def add_parser(sub: Any) -> None:
    """The `estimate` subcommand's arguments."""
    p = sub.add_parser("estimate", help="estimate per-GPU memory of each configuration without a GPU")
    p.add_argument("campaign", type=Path, nargs="?", help="campaign spec (TOML)")
    p.add_argument(
        "--model", type=Path, help="a Hugging Face causal LM directory (config.json alone is read)"
    )
    p.add_argument("--gpus", type=int, default=0, help="GPUs (ranks) per configuration")
    p.add_argument("--strategy", default="", help="none | ddp | fsdp")
    p.add_argument("--gpu-memory", type=float, default=0.0, help="GPU memory in GB to check against")
    p.add_argument("--precision", default="", help="fp32 | bf16 | fp16")
    p.add_argument("--microbatch", type=int, default=0)
    p.add_argument("--max-length", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def request_of(args: argparse.Namespace) -> dict[str, Any]:
    """The subprocess request, every value checked here first."""
    if bool(args.campaign) == bool(args.model):
        raise BadEstimateInput("give a campaign file or --model DIR (one of them)")
    if args.strategy and args.strategy not in STRATEGIES:
        raise BadEstimateInput(f"--strategy must be one of {', '.join(STRATEGIES)}, got {args.strategy!r}")
    if args.precision and args.precision not in PRECISIONS:
        raise BadEstimateInput(f"--precision must be one of {', '.join(PRECISIONS)}, got {args.precision!r}")
    for flag, value in (
        ("--gpus", args.gpus),
        ("--microbatch", args.microbatch),
        ("--max-length", args.max_length),
    ):
        if value < 0:
            raise BadEstimateInput(f"{flag} must be ≥ 1, got {value}")
    if args.gpu_memory < 0:
        raise BadEstimateInput(f"--gpu-memory must be > 0 GB, got {args.gpu_memory:g}")
    if args.strategy == "none" and args.gpus > 1:
        raise BadEstimateInput("--strategy none runs on one GPU: use ddp or fsdp with --gpus > 1")
    request: dict[str, Any] = {
        "gpus": args.gpus,
        "strategy": args.strategy,
        "gpu_memory_gb": args.gpu_memory,
        "precision": args.precision,
        "microbatch": args.microbatch,
        "max_length": args.max_length,
    }
    if args.model:
        config = args.model / "config.json"
        if not config.is_file():
            raise BadEstimateInput(f"{config}: no config.json in the model directory")
        request["model"] = str(args.model.resolve())
    else:
        load_spec(args.campaign)  # a bad spec is one line here, before any subprocess
        request["campaign"] = str(args.campaign.resolve())
    return request


def run_estimate(args: argparse.Namespace) -> int:
    """Run the estimate subprocess and print one line per configuration."""
    try:
        request = request_of(args)
    except (BadEstimateInput, SpecError) as exc:
        print(f"pilot-tui: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    proc = subprocess.run(
        module_command("pilot_tui.runner.memory.estimate", [json.dumps(request)]),
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        if proc.returncode != EXIT_BAD_INPUT:
            print(
                f"pilot-tui: error: the estimate process ended with code {proc.returncode}", file=sys.stderr
            )
        return EXIT_BAD_INPUT if proc.returncode == EXIT_BAD_INPUT else EXIT_FAILED
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(report_lines(result)))
    control = next((e for e in result["configurations"] if e.get("name") == "control"), None)
    return EXIT_OK if control and (control.get("verdict") or {}).get("fits") else EXIT_FAILED


def report_lines(result: dict[str, Any]) -> list[str]:
    """The printed report: what was estimated, one line per configuration, the recommendation."""
    t = result["target"]
    memory = f"{t['gpu_memory_gb']:g} GB GPUs" if t.get("gpu_memory_gb") else "the common GPU sizes"
    lines = [
        f"{est.ESTIMATE_LABEL}: {result['source']}; {t['strategy']} on {t['gpus']} GPU(s), "
        f"checked against {memory}, headroom {t['headroom']:.0%}",
        f"  allowance: {result['allowance']}",
    ]
    for entry in result["configurations"]:
        lines.append("  " + est.line(entry))
        smallest = entry.get("smallest_configuration")
        if smallest:
            lines.append(
                f"    smallest configuration that would: {smallest['strategy']} on {smallest['gpus']} × "
                f"{smallest['gpu_memory_gb']} GB (needs {smallest['need_mib'] / 1024:.1f} GiB per GPU; "
                f"{smallest['basis']})"
            )
        elif entry.get("verdict", {}).get("fits") is False and entry.get("name") == "control":
            lines.append(
                "    no configuration up to 16 GPUs holds it: consider LoRA, checkpointing, a shorter length"
            )
    rec = result.get("recommendation")
    if rec:
        lines.append(
            f"rent: {rec['gpus']} × {rec['gpu_memory_gb']} GB ({rec['strategy']}), "
            f"{rec['need_mib'] / 1024:.1f} GiB per GPU ({rec['basis']})"
        )
    return lines
