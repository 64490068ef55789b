"""Estimate vs measured peak allocated, per configuration of a record made on a GPU (R23).

    python scripts/gpu_check_estimate.py RECORD.toml     # or called by scripts/gpu_check.py

The `estimate` phase predicted each configuration's peak allocated memory under fake tensors
before anything was loaded; the first_step / steady / eval_longest rows (and the fit-search
points) measured it on the GPU. One line per configuration: estimate, measured, measured/estimate.
The target is ±10 %, checked where the pilot measured sequences as long as the estimate assumed
(the configuration's max length); a tiny model's figures are dominated by the library's own
workspaces (cuBLAS) and say less than a real model's.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET = 0.10


def report_estimate(
    data: dict[str, Any], check: Callable[[bool, str], bool] | None = None
) -> list[dict[str, Any]]:
    """Print estimate / measured per configuration; with `check`, each training ratio is a check."""
    from pilot_tui.analysis.memory_estimate import plan_view

    view = plan_view(data)
    if view is None:
        if check:
            check(False, "estimate: the record has no [estimate] section (the estimate phase did not run)")
        return []
    print(f"estimate vs measured ({view['measured_counter']}), target ±{TARGET:.0%}:")
    out = []
    for c in view["configurations"]:
        if not c["estimable"]:
            print(f"  {c['name']:<18} {c['reason']}")
            if check:
                check(False, f"estimate {c['name']}: {c['reason']}")
            continue
        train, evaluated = c.get("measured_train_mb"), c.get("measured_eval_mb")
        line = f"  {c['name']:<18} train estimate {c['estimate_train_mb']:9.1f} MiB"
        if train is not None:
            line += f" measured {train:9.1f} MiB" + (
                f" ratio {c['train_ratio']:.3f}" if "train_ratio" in c else ""
            )
        line += f" · eval estimate {c['estimate_eval_mb']:9.1f} MiB"
        if evaluated is not None:
            line += f" measured {evaluated:9.1f} MiB" + (
                f" ratio {c['eval_ratio']:.3f}" if "eval_ratio" in c else ""
            )
        print(line, flush=True)
        out.append(c)
        if "width_note" in c:
            print(f"  {'':<18} ({c['width_note']}: a ratio below 1 there is the data, not the estimate)")
        for part in ("train", "eval"):
            # Checked only where the pilot measured the sequence length the estimate assumed.
            if check and f"{part}_ratio" in c and c.get(f"{part}_same_length", True):
                check(
                    abs(c[f"{part}_ratio"] - 1) <= TARGET,
                    f"estimate {c['name']} {part}: measured/estimate {c[f'{part}_ratio']:.3f} within ±{TARGET:.0%}",
                )
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: gpu_check_estimate.py RECORD.toml", file=sys.stderr)
        return 2
    data = tomllib.loads(Path(args[0]).read_text(encoding="utf-8"))
    rows = report_estimate(data)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
