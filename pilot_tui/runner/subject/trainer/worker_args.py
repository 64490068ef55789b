"""The arguments a trainer worker (`runner/workers/`) is started with: both ends in one place.

The runner names the campaign file and the script as it read them (their hashes) and its CPU
thread count; the worker reloads them checked (`campaign.load_checked`) and adds its own."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ...context import RunContext


def worker_argv(ctx: RunContext, out: Path) -> list[str]:
    """What a trainer worker (`runner/workers/`) reloads the campaign from: the files, their
    hashes as the runner read them, its CPU thread count, and the worker's folder."""
    return [
        "--spec", str(ctx.loaded.path),
        "--spec-sha256", ctx.loaded.sha256,
        "--script-sha256", ctx.memo["trainer_capture"]["script_sha256"],
        "--threads", str(torch.get_num_threads()),
        "--out", str(out),
    ]  # fmt: skip


def worker_parser(prog: str) -> argparse.ArgumentParser:
    """The worker's side of `worker_argv`; each worker adds its own arguments."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--spec", type=Path, required=True)
    p.add_argument("--spec-sha256", required=True)
    p.add_argument("--script-sha256", required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    return p
