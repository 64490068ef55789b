"""Diff two campaign records row by row, leaving out what a rerun measures anew (times, memory).

    python scripts/record_diff.py BEFORE.toml AFTER.toml

Used to show that a change of structure changed no verdict, reason or measured value: the same
campaign run before and after must differ only in its clocks, its memory counters and the paths
of the folder it ran in. Every other difference is printed, one line each (`phases[steady].details
.loss_last: 3.1 -> 3.2`); exit status 1 when there is one. A CPU campaign is deterministic when
its steady phase times a fixed count (`phases.steady_precision = 0`): the later phases then train
on the same updates.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

# Keys whose values a rerun measures anew: wall clocks, memory, machine-load figures, and the
# hashes and sizes of files whose zip entries carry the writer's process id.
TIMING_KEY = re.compile(
    r"(^|_)(s|ms|seconds|started|finished|time|times|timings|duration|speed|rss|mb|mib|bytes|load|runqueue"
    r"|threads|pid|hostname|per_s|share|precision|ci|stdev|mean|median|p\d+|min|max|spread|interval"
    r"|window|windows|reference|clock|peak|runtime|second|sha256|size)(_|$)"
)
# Whole sections a rerun measures anew, or that name the run's folder and time.
SKIPPED_SECTIONS = {"environment", "plan", "estimate", "artifacts", "campaign", "spec", "revision", "session"}
# Numbers with a unit of time or memory inside a reason, and the record folder's paths.
MEASURED_TEXT = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?\s*(?:(?:ms|s|MiB|GiB|MB|GB)\b|%|×)")
# Notes that describe the machine while it was timed (its speed moved, it was busy), not the run.
MACHINE_NOTE = re.compile(r"machine's speed moved|machine was busy|load average")
PATH_TEXT = re.compile(r"(/[\w.+-]+)+/(records|trainer-\w+|runs)\b[\w./+-]*")


def masked(text: str) -> str:
    return PATH_TEXT.sub("<path>", MEASURED_TEXT.sub("<measured>", text))


def measured_key(key: str) -> bool:
    return bool(TIMING_KEY.search(key.lower())) or key in ("memory", "nvml", "ranks_memory")


def differences(a: Any, b: Any, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if measured_key(str(key)):
                continue
            if key not in a or key not in b:
                out.append(
                    f"{where}.{key}: {'absent' if key not in a else 'present'} -> "
                    f"{'absent' if key not in b else 'present'}"
                )
                continue
            differences(a[key], b[key], f"{where}.{key}", out)
        return
    if isinstance(a, list) and isinstance(b, list):
        a = [x for x in a if not (isinstance(x, str) and MACHINE_NOTE.search(x))]
        b = [x for x in b if not (isinstance(x, str) and MACHINE_NOTE.search(x))]
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items -> {len(b)} items")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            differences(x, y, f"{where}[{i}]", out)
        return
    if isinstance(a, str) and isinstance(b, str):
        if masked(a) != masked(b):
            out.append(f"{where}: {a[:160]!r} -> {b[:160]!r}")
        return
    if isinstance(a, float) and isinstance(b, float) and (a == b or (math.isnan(a) and math.isnan(b))):
        return
    if a != b:
        out.append(f"{where}: {a!r} -> {b!r}")


def by_step(record: dict[str, Any], section: str, key: str) -> dict[str, Any]:
    return {str(row.get(key)): row for row in record.get(section, [])}


def record_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for section, key in (("phases", "step"), ("runs", "id"), ("variants", "id")):
        a, b = by_step(before, section, key), by_step(after, section, key)
        if list(a) != list(b):
            out.append(f"{section}: {list(a)} -> {list(b)}")
        for name in a.keys() & b.keys():
            differences(a[name], b[name], f"{section}[{name}]", out)
    for section in sorted((set(before) | set(after)) - SKIPPED_SECTIONS - {"phases", "runs", "variants"}):
        differences(before.get(section), after.get(section), section, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    args = p.parse_args(argv)
    found = record_differences(tomllib.loads(args.before.read_text()), tomllib.loads(args.after.read_text()))
    for line in found:
        print(line)
    print(f"{len(found)} difference(s) beside times and memory")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
