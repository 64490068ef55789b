"""The LR board's bookkeeping and comparison (R13, R14). Pure: no torch, no Textual.

Run ids: an LR run is named `lr<lr>-s<seed>` (see `phase_table.lr_run_name`) and each attempt gets the
next number, `lr1e-4-s0-1`, `lr1e-4-s0-2`, …; a number is never reused, and a retry names the
attempt it follows in `retry_of`. The record only grows, so an old row — diverged or not — stays.

Comparison: per LR, the final and best validation over its seeds (mean, min, max, std); each LR
against the control on the seeds both have. A difference is *reliable* only when it was measured
on at least two seeds, has the same sign on every one of them, and the gap between the means is
larger than the seed spread (the wider of the two LRs' min-max ranges). Otherwise the board says
"no reliable difference" and names no winner: the control stays the reference.
"""

from __future__ import annotations

import contextlib
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.phase_table import lr_run_name
from ..core.rows import RunRow, read_runs
from ..core.spec import StopSpec

# Every status a [[runs]] row can hold.
RUN_STATUSES = ("running", "completed", "stopped", "diverged", "failed", "cancelled")
# Runs that reached an outcome the comparison can use. A failed or cancelled run measured
# nothing about the LR (a crash, a kill); it stays in the record but not in the comparison.
MEASURED = ("completed", "stopped", "diverged")
# The values of `vs_control` in `[[board.lrs]]`.
VERDICTS = ("reference", "better", "worse", "no reliable difference", "diverged", "missing")

_NAME = re.compile(r"lr(?P<mantissa>\d+(?:\.\d+)?)e(?P<exponent>[+-]?\d+)-s(?P<seed>-?\d+)")


def best_validation(points: Iterable[Mapping[str, Any]]) -> tuple[float, int] | None:
    """(loss, update) of a run's best validation point *after training started*: update 0 is the
    shared starting point of every run, not something a run achieved. None when there is none."""
    trained = [
        (float(p["loss"]), int(p["update"]))
        for p in points
        if isinstance(p, Mapping)
        and isinstance(p.get("update"), int)
        and p["update"] > 0
        and isinstance(p.get("loss"), int | float)
        and math.isfinite(p["loss"])
    ]
    return min(trained) if trained else None


def parse_run_name(name: str) -> tuple[float, int]:
    """(lr, seed) of a run base name such as `lr1e-4-s0`; ValueError when it is not one."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not an LR run name (expected lr<mantissa>e<exponent>-s<seed>)")
    lr = float(f"{match['mantissa']}e{match['exponent']}")
    seed = int(match["seed"])
    if lr_run_name(lr, seed) != name:
        # e.g. `lr10e-5-s0`: readable, but not the canonical spelling the plan uses.
        raise ValueError(f"{name!r} is not canonical; the plan spells it {lr_run_name(lr, seed)!r}")
    return lr, seed


def split_run_id(run_id: str) -> tuple[str, int]:
    """(base name, attempt) of a run id such as `lr1e-4-s0-2`."""
    base, _, number = run_id.rpartition("-")
    if not base or not number.isdigit():
        raise ValueError(f"{run_id!r} is not a run id (expected <base>-<attempt>)")
    return base, int(number)


def _attempts(runs: Iterable[Mapping[str, Any] | RunRow], base: str) -> list[tuple[int, str]]:
    out = []
    for row in read_runs(list(runs)):
        try:
            b, n = split_run_id(row.id)
        except ValueError:
            continue
        if b == base:
            out.append((n, row.id))
    return out


def next_attempt(runs: Iterable[Mapping[str, Any]], base: str) -> tuple[int, str]:
    """(attempt number, id it retries or "") for a new run of `base`, given the record's runs.

    The number is one past the highest ever used, so ids are never reused even if rows were
    written out of order; the retry points at that highest attempt.
    """
    seen = _attempts(runs, base)
    if not seen:
        return 1, ""
    number, last = max(seen)
    return number + 1, last


def unique_run(runs: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> dict[str, Any]:
    """The row to append: unchanged, or — if its id is already taken — under the next free id.

    A second row with an existing id would read as a replacement; the old row is never touched
    and the newcomer keeps the id it claimed in `id_conflict`.
    """
    out = dict(row)
    run_id = str(out.get("id", ""))
    if not any(r.id == run_id for r in read_runs(list(runs))):
        return out
    try:
        base, _ = split_run_id(run_id)
    except ValueError:
        base = run_id
    number, _ = next_attempt(runs, base)
    out["id"] = f"{base}-{number}"
    out["id_conflict"] = run_id
    return out


def attempt(runs: Sequence[Mapping[str, Any]], run_name: str) -> dict[str, Any]:
    """The overrides that number the next attempt of an LR run: one past the highest attempt ever
    recorded for this name (never reused, R14), `retry_of` naming the one before, and the run's
    own LR and seed so the phase's announced params already show them."""
    number, retry_of = next_attempt(runs, run_name)
    out: dict[str, Any] = {"attempt": number, "retry_of": retry_of}
    # Not an LR run name: the runner refuses it with the reason.
    with contextlib.suppress(ValueError):
        out["lr"], out["seed"] = parse_run_name(run_name)
    return out


def lost_run(run_id: str, retry_of: str, reason: str, *, cancelled: bool, spec_sha256: str) -> dict[str, Any]:
    """The `[[runs]]` row of a run whose runner died inside it: a failure keeps its row (R14)."""
    row: dict[str, Any] = {
        "id": run_id,
        "retry_of": retry_of,
        # Killed because it did not stop when asked: the user's cancel, not a crash.
        "status": "cancelled" if cancelled else "failed",
        "stop_cause": "runner_died",
        "reason": reason,
    }
    try:
        lr, seed = parse_run_name(split_run_id(run_id)[0])
        row |= {"lr": lr, "seed": seed}
    except ValueError:
        pass
    return row | {"spec_sha256": spec_sha256, "losses": [], "validation": []}


# ------------------------------------------------------------------ comparison


def select_runs(runs: Iterable[Mapping[str, Any] | RunRow]) -> dict[tuple[float, int], RunRow]:
    """The run that counts for each (lr, seed): the latest measured attempt, never the best one."""
    chosen: dict[tuple[float, int], tuple[int, RunRow]] = {}
    for row in read_runs(list(runs)):
        if row.status not in MEASURED or row.lr is None or row.seed is None:
            continue
        try:
            _, attempt = split_run_id(row.id)
        except ValueError:
            attempt = 0
        key = (row.lr, row.seed)
        if key not in chosen or attempt >= chosen[key][0]:
            chosen[key] = (attempt, row)
    return {k: v[1] for k, v in chosen.items()}


def _stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}_mean": statistics.fmean(values),
        f"{prefix}_min": min(values),
        f"{prefix}_max": max(values),
        f"{prefix}_std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def difference(a: Mapping[int, float], b: Mapping[int, float]) -> dict[str, Any]:
    """How `a` compares with `b` (seed -> final validation, lower is better), on common seeds.

    `gap` = mean(a) - mean(b) (negative: a is lower); `spread` = the wider min-max range of the
    two over those seeds; `same_sign` = a is lower on every seed, or higher on every seed.
    """
    seeds = sorted(set(a) & set(b))
    out: dict[str, Any] = {"seeds_compared": len(seeds)}
    if not seeds:
        return out | {"reliable": False}
    gap = statistics.fmean(a[s] for s in seeds) - statistics.fmean(b[s] for s in seeds)
    diffs = [a[s] - b[s] for s in seeds]
    same_sign = all(d < 0 for d in diffs) or all(d > 0 for d in diffs)
    out |= {"gap": gap, "same_sign": same_sign}
    if len(seeds) < 2:
        return out | {"reliable": False}
    spread = max(max(x[s] for s in seeds) - min(x[s] for s in seeds) for x in (a, b))
    return out | {"spread": spread, "reliable": same_sign and abs(gap) > spread}


def _verdict(diff: Mapping[str, Any]) -> str:
    if not diff.get("seeds_compared"):
        return "missing"
    if diff["seeds_compared"] >= 2 and not diff["reliable"]:
        return "no reliable difference"
    if diff["gap"] == 0:
        return "no reliable difference"
    # One seed: the direction is reported, but `reliable` stays false and no winner is named.
    return "better" if diff["gap"] < 0 else "worse"


def _ranking_holds(ranking: Sequence[float], finals: Mapping[float, Mapping[int, float]]) -> bool:
    """Whether every seed common to the ranked LRs orders them as their means do."""
    if len(ranking) < 2:
        return True
    common = set.intersection(*(set(finals[lr]) for lr in ranking))
    if not common:
        return False
    for seed in common:
        order = sorted(ranking, key=lambda lr: finals[lr][seed])
        if order != list(ranking):
            return False
    return True


def compare(
    runs: Iterable[Mapping[str, Any] | RunRow],
    control: float,
    lrs: Sequence[float] = (),
    metric: str = "final_validation",
) -> dict[str, Any]:
    """The `[board]` section: per-LR figures, each LR against the control, and the decision.

    `lrs` lists the declared LRs (so one with no run yet shows as missing); runs of other LRs
    are compared too. Lower `metric` is better. A winner is named only when it differs reliably
    from every other LR; otherwise the control stays the reference.
    """
    selected = select_runs(runs)
    all_lrs = list(dict.fromkeys([control, *lrs, *sorted({lr for lr, _ in selected})]))
    finals: dict[float, dict[int, float]] = {}
    rows: list[dict[str, Any]] = []
    diverged: set[float] = set()
    for lr in all_lrs:
        mine = {seed: row for (x, seed), row in selected.items() if x == lr}
        bad = sorted(seed for seed, row in mine.items() if row.status == "diverged")
        finals[lr] = {
            seed: value
            for seed, row in mine.items()
            if seed not in bad and (value := row.metric(metric)) is not None
        }
        best = [
            row.best_validation
            for seed, row in mine.items()
            if seed not in bad and row.best_validation is not None
        ]
        if bad:
            diverged.add(lr)
        rows.append(
            {
                "lr": lr,
                "control": lr == control,
                "seeds": sorted(mine),
                "runs": [mine[s].id for s in sorted(mine)],
                "diverged": len(bad),
                "diverged_seeds": bad,
            }
            | _stats([finals[lr][s] for s in sorted(finals[lr])], "final")
            | _stats(best, "best")
        )
    for row in rows:
        lr = row["lr"]
        if lr == control:
            row["vs_control"] = "reference"
            continue
        diff = difference(finals[lr], finals[control])
        row |= {f"{k}_to_control" if k == "gap" else k: v for k, v in diff.items()}
        row["vs_control"] = "diverged" if lr in diverged else _verdict(diff)

    ranked = sorted(
        (lr for lr in all_lrs if finals[lr] and lr not in diverged),
        key=lambda lr: statistics.fmean(finals[lr].values()),
    )
    board: dict[str, Any] = {
        "metric": metric,
        "lower_is_better": True,
        "control": control,
        "seeds": sorted({seed for _, seed in selected}),
        "runs_used": [selected[k].id for k in sorted(selected)],
        "ranking": ranked,
        "ranking_holds": _ranking_holds(ranked, finals),
        "diverged": sorted(diverged),
        "lrs": rows,
    }
    board |= _decide(ranked, finals, control)
    # "Beats every other LR" must not hide a declared LR that has no measured run yet.
    unmeasured = [lr for lr in all_lrs if not finals[lr] and lr not in diverged]
    if unmeasured and ranked:
        board["decision"] += f" (not measured yet: {', '.join(f'lr {lr:g}' for lr in unmeasured)})"
    return board


def _decide(ranked: Sequence[float], finals: Mapping[float, Mapping[int, float]], control: float) -> dict:
    if not ranked:
        return {"decision": "no LR has a measured validation yet: the control stays the reference"}
    leader = ranked[0]
    out: dict[str, Any] = {"leader": leader}
    if len(ranked) == 1:
        return out | {"decision": f"only lr {leader:g} has a measured validation: nothing to compare"}
    diffs = {lr: difference(finals[leader], finals[lr]) for lr in ranked[1:]}
    unreliable = [lr for lr, d in diffs.items() if not d["reliable"]]
    if not unreliable:
        out["winner"] = leader
        if leader == control:
            return out | {"decision": f"the control lr {control:g} remains the best choice on every seed"}
        return out | {
            "decision": f"lr {leader:g} beats every other LR on every seed, by more than the seed spread"
        }
    seeds = min(d["seeds_compared"] for d in diffs.values())
    names = ", ".join(f"{lr:g}" for lr in unreliable)
    if seeds < 2:
        why = f"one seed cannot tell lr {leader:g} from {names} (spread not measured; add seeds)"
    else:
        why = f"no reliable difference between lr {leader:g} and {names} (within the seed spread or the ranking flips)"
    return out | {"decision": f"{why}: the control lr {control:g} stays the reference"}


# Updates whose example indices make `first_batches_sha256` (the same-start evidence).
FIRST_BATCHES = 3


def stop_cause(loss: float, initial: float, stop: StopSpec) -> str:
    """The declared divergence cause this update's loss meets, or ""."""
    if not math.isfinite(loss):
        return "non_finite" if stop.non_finite else ""
    if math.isfinite(initial) and loss > stop.explosion_factor * initial:
        return "loss_explosion"
    return ""
