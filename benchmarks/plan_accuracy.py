"""How well does the plan's time projection predict a real run? (R19, R27 acceptance)

For each round, in fresh runner processes (as a rental run would start):

1. *pilot*: the demo's stack, load, first_step, steady, eval_longest, save and export phases, then
   the plan computed from that record for the demo's declared budget of 200 updates, with a save
   and an evaluation of `--eval-examples` examples every `--every` updates (`[plan] save_every`,
   `eval_every`, `eval_examples`; no restarts, no safety margin): train = load + first update +
   199 × steady mean step time, plus the saves, the evaluations and the export;
2. *actual*: the same configuration runs those 200 updates for real in a fresh runner — load,
   first_step, then steady in chunks of `--every` updates, each followed by a save and by the
   evaluation (⌈eval_examples / eval batch⌉ timed batches, as the plan counts them) — then an
   export; the measured durations are summed (for a save its timed write, for an evaluation its
   synchronised forwards: what the plan reserves for them, without the pilot's own reload checks).

Prints predicted / actual per round (the whole run, and its training part alone), whether the
range the plan prints (steady p10–p90) contains the actual, and the median ratio. Target: within
±10 % on this CPU. Other processes on the machine slow both sides unevenly: the load average is
printed with each round.

    .venv/bin/python benchmarks/plan_accuracy.py [--rounds 3] [--threads N] [--every 50] [--eval-examples 8]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pilot_tui.analysis.plan import PlannedRun, compute_plan  # noqa: E402
from pilot_tui.core.events import PhaseFinished  # noqa: E402
from pilot_tui.core.phase_table import in_group  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402

DEMO = REPO / "campaigns" / "demo.toml"


def write_campaign(folder: Path, name: str, skip: list[str], every: int, eval_examples: int) -> Path:
    raw = tomllib.loads(DEMO.read_text())
    for section in ("variants", "lr_board"):
        raw.pop(section, None)  # the control only: its 200-update budget is the run predicted
    raw["phases"]["skip"] = skip
    # The actual run is longer than the demo's per-phase time ceiling; the pilot keeps the demo's.
    raw["limits"] = {}
    raw["plan"] = dict(
        raw.get("plan", {}),
        dataset_size=0,
        priority=["control"],
        safety_margin=0.0,
        save_every=every,
        eval_every=every,
        eval_examples=eval_examples,
        restarts=0,
    )
    path = folder / f"{name}.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def run_steps(campaign: Path, records: Path) -> dict[str, Any]:
    session = Session(campaign, records)
    session.start()
    try:
        for step in session.steps:
            for _ in session.run_step(step.key):
                pass
    finally:
        session.close()
    assert session.record is not None
    return session.record.data


def step(session: Session, key: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    rows = [ev.row for ev in session.run_step(key, overrides) if isinstance(ev, PhaseFinished)]
    if not rows or rows[0]["verdict"] == "fail":
        raise SystemExit(f"the actual run failed in {key}: {rows[0]['reason'] if rows else 'no row'}")
    return rows[0]


def actual_run(campaign: Path, records: Path, run: PlannedRun, every: int) -> float:
    """The planned run for real, in a fresh runner: its measured seconds, summed."""
    session = Session(campaign, records)
    session.start()
    total = 0.0
    try:
        for key in ("stack", "load", "first_step"):
            row = step(session, key)
            total += row["duration_s"] if key != "stack" else 0.0
        done = 1  # first_step's update
        while done < run.updates:
            # Each steady phase takes one untimed warm-up update before its timed ones.
            chunk = min(every - done % every, run.updates - done)
            if chunk >= 2:
                row = step(session, "steady", {"steady_updates": chunk - 1})
                total += row["duration_s"]
            else:
                row = step(session, "first_step")  # one more update (first_step keeps the state)
                total += row["duration_s"]
            done += chunk
            if done % every == 0 or done == run.updates:
                save = step(session, "save")
                total += save["details"]["save_s"]
                for _ in range(run.eval_batches):
                    ev = step(session, "eval_longest")
                    total += ev["details"]["forward_s"]
        total += step(session, "export")["duration_s"]
    finally:
        session.close()
    return total


def one_round(folder: Path, every: int, eval_examples: int) -> tuple[float, float, dict[str, Any]]:
    pilot_skip = [*in_group("data"), "lr_run", *in_group("closing")]
    pilot = run_steps(write_campaign(folder, "pilot", pilot_skip, every, eval_examples), folder / "records")
    plan = compute_plan(pilot, record_dir=folder)
    budget = int(pilot["accounting"]["updates"])
    if plan.sheet.kept != "control":
        raise SystemExit(f"the pilot kept no configuration: {plan.sheet.kept_reason}")
    (control,) = [o for o in plan.package.order if o.id == "control"]
    assert control.updates == budget, (control.updates, budget)
    assert control.checkpoints == budget // every and control.evaluations == budget // every
    predicted = control.total_s
    campaign = write_campaign(folder, "actual", pilot_skip, every, eval_examples)
    actual = actual_run(campaign, folder / "records", control, every)
    span = control.interval
    info = {
        "budget": budget,
        "saves": control.checkpoints,
        "evaluations": control.evaluations,
        "eval_batches": control.eval_batches,
        "train_s": control.train_s,
        "parts_s": (control.train_s, control.eval_s, control.save_s, control.export_s),
        "range_s": (span.low_s, span.high_s) if span and span.low_s is not None else (math.nan, math.nan),
    }
    return predicted, actual, info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads in both runner processes (OMP_NUM_THREADS); 0 keeps torch's default. "
        "On a shared 2-core machine, 1 avoids the stalls of oversubscribed OpenMP threads",
    )
    parser.add_argument("--every", type=int, default=50, help="updates between saves and evaluations")
    parser.add_argument("--eval-examples", type=int, default=8, help="examples per evaluation")
    args = parser.parse_args()
    if args.threads:
        # Inherited by the runner processes the sessions spawn: pilot and actual run the same way.
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    ratios, inside = [], 0
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / f"round{i}"
            folder.mkdir()
            predicted, actual, info = one_round(folder, args.every, args.eval_examples)
            ratio = predicted / actual
            ratios.append(ratio)
            low, high = info["range_s"]
            inside += low <= actual <= high
            train, evals, saves, export = info["parts_s"]
            print(
                f"round {i + 1}: {info['budget']} updates, {info['saves']} saves, {info['evaluations']} evaluations × "
                f"{info['eval_batches']} batches: predicted {predicted:.2f} s (train {train:.2f} + eval {evals:.2f} + "
                f"saves {saves:.3f} + export {export:.3f}), actual {actual:.2f} s, predicted/actual {ratio:.3f}; "
                f"range {low:.2f}–{high:.2f} s {'contains' if low <= actual <= high else 'MISSES'} the actual "
                f"(load average {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    median = statistics.median(ratios)
    within = abs(median - 1) <= 0.10
    print(
        f"median predicted/actual {median:.3f} over {len(ratios)} round(s): "
        f"{'within' if within else 'OUTSIDE'} ±10 % (torch threads: {args.threads or 'default'}); "
        f"the printed range contained the actual in {inside} of {len(ratios)}"
    )
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
