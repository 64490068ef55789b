"""How well does the plan's time projection predict a real run? (R19, R27 acceptance)

Default: a campaign written the way a user writes one (`benchmarks/user_gpt/`: their own small
GPT in `model.py` and data in `data.py`, imported by `task.py` beside them). Each round:

1. *pilot*, in a fresh runner process: stack, load, first_step, steady (timed to the campaign's
   precision) and eval_longest; the plan computed from that record projects the training time of
   the declared 200 updates, `load + first update + 199 × steady mean step`, and its range,
   `load + first update + 199 × [low, high]` of `analysis/step_time.step_range` for 199 updates
   (the prediction interval of a 199-update run's mean step time — at least the spread of the
   means of the 199-update stretches steady timed, a run this short being timed in several —
   widened by the contention the timed loop measured and by the machine speeds the pilot's
   reference timings saw, its low end reaching as much lower as the pilot's own loop around the
   model took of the step: a plain loop may do none of it);
2. *actual*: the user's own plain loop (`user_gpt/train.py`) trains the same model on the same
   data for 200 updates in a fresh process, timed from building the model to the last update.

Prints predicted / actual per round, whether the range held the actual, and beside it whether
the p10–p90 range of single steps would have. Targets: median predicted / actual within ±5 %, the
range holding the actual in ≥ 9 of 10 rounds. Other load on the machine moves both sides: the
load average is printed with each round.

    .venv/bin/python benchmarks/plan_accuracy.py [--rounds 10] [--threads 1]

`--demo`: the whole rental of the demo campaign, against the pilot's own phases as the actual:

1. *pilot*: the demo's stack, load, first_step, steady, eval_longest, save and export phases, then
   the plan computed from that record for the demo's declared budget of 200 updates, with a save
   and an evaluation of `--eval-examples` examples every `--every` updates (`[plan] save_every`,
   `eval_every`, `eval_examples`; no restarts, no safety margin): train = load + first update +
   199 × steady mean step time, plus the saves, the evaluations and the export;
2. *actual*: the same configuration runs those 200 updates for real in a fresh runner — load,
   first_step, then steady in chunks of `--every` updates (exactly that many: no timing to a
   precision), each followed by a save and by the evaluation (⌈eval_examples / eval batch⌉ timed
   batches, as the plan counts them) — then an export; the measured durations are summed.
   Target: within ±10 %.

    .venv/bin/python benchmarks/plan_accuracy.py --demo [--rounds 3] [--every 50] [--eval-examples 8]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pilot_tui.analysis.plan import PlannedRun, compute_plan  # noqa: E402
from pilot_tui.analysis.step_time import pilot_speeds, speed_moved, step_range  # noqa: E402
from pilot_tui.core.events import PhaseFinished  # noqa: E402
from pilot_tui.core.phase_table import in_group  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402

DEMO = REPO / "campaigns" / "demo.toml"
USER = REPO / "benchmarks" / "user_gpt"


def write_campaign(folder: Path, name: str, skip: list[str], every: int, eval_examples: int) -> Path:
    raw = tomllib.loads(DEMO.read_text())
    for section in ("variants", "lr_board"):
        raw.pop(section, None)  # the control only: its 200-update budget is the run predicted
    raw["phases"]["skip"] = skip
    # The demo bounds its steady for the 37 500-update rental it plans; the run predicted here is its
    # own 200 updates, short enough for steady to time in stretches: the default budget holds them.
    raw["phases"].pop("steady_budget_s", None)
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
                # Exactly chunk - 1 timed updates: the actual run trains its budget, no more.
                row = step(session, "steady", {"steady_updates": chunk - 1, "steady_precision": 0.0})
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


def user_round(folder: Path, device: str) -> dict[str, Any]:
    """One pilot of the user's campaign and one run of their own loop, each in a fresh process."""
    raw = tomllib.loads((USER / "campaign.toml").read_text())
    raw["task"]["file"] = str(USER / "task.py")
    raw["batch"]["device"] = device  # both sides on the same device: the campaign's own is "cpu"
    raw.setdefault("phases", {})["skip"] = [
        *in_group("data"),
        "save",
        "export",
        "fit_search",
        "lr_run",
        *in_group("closing"),
    ]
    campaign = folder / "user-gpt.toml"
    campaign.write_text(tomli_w.dumps(raw))
    pilot = run_steps(campaign, folder / "records")
    failed = [r["step"] for r in pilot["phases"] if r["verdict"] == "fail"]
    if failed:
        raise SystemExit(f"the pilot failed in {failed}")
    plan = compute_plan(pilot)
    (control,) = [o for o in plan.package.order if o.id == "control"]
    budget = int(raw["batch"]["updates"])
    steady = next(r for r in pilot["phases"] if r["step"] == "steady")["details"]
    # The plan's own figures: its startup (load + first update) and the per-update range it prints.
    fixed = control.startup_s
    span = control.interval
    assert span is not None and span.step_low_s is not None, "the plan has no interval of the mean step"
    speeds = pilot_speeds([r.get("details", {}) for r in pilot["phases"]])
    assert span.step_low_s == step_range(steady, budget - 1, speeds).low_s  # type: ignore[union-attr]
    b = raw["batch"]
    # The runner's fixed reference workload (runner/timing/speed_reference.py), timed here on both sides
    # of the user's loop as steady timed it on both sides of its own: the machine's speed during
    # each, so the drift between the pilot and the actual run can be told from the tool's error.
    from pilot_tui.runner.timing.speed_reference import reference_s

    speed_before = reference_s()
    out = subprocess.run(
        [
            sys.executable,
            str(USER / "train.py"),
            f"--updates={budget}",
            f"--microbatch={b['microbatch']}",
            f"--accumulation={b['accumulation']}",
            f"--device={device}",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=USER,
        # Its own session, as the runner is started in (Linux schedules each session as a group):
        # otherwise the user's loop would share a CPU share with whatever started this script.
        start_new_session=True,
    )
    speed_after = reference_s()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    actual = float(result["seconds"])
    pilot_speed = statistics.fmean(steady["speed_reference_s"])
    own = float(steady.get("loop_own_share") or 0.0)
    return {
        "predicted": float(control.train_s),
        "low": fixed + (budget - 1) * span.step_low_s,
        # The same range without its reach for a plain loop's leaner step (the pilot's own share).
        "low_without_own": fixed + (budget - 1) * span.step_low_s / (1 - min(max(own, 0.0), 0.5)),
        "own": own,
        "high": fixed + (budget - 1) * (span.step_high_s or 0.0),
        "p10p90": (
            fixed + (budget - 1) * steady["step_time_p10_s"],
            fixed + (budget - 1) * steady["step_time_p90_s"],
        ),
        "actual": actual,
        # The user's loop's own step (its updates after the first) against steady's mean: how
        # much of the error is the step, not the startup.
        "step_ratio": float(steady["step_s_mean"]) / float(result["step_s"]),
        # How much slower the machine ran the reference during the actual than around steady.
        "drift": statistics.fmean([speed_before, speed_after]) / pilot_speed,
        "budget": budget,
        "steady": steady,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--demo", action="store_true", help="the demo's whole rental against the pilot's own phases"
    )
    parser.add_argument("--every", type=int, default=50, help="--demo: updates between saves and evaluations")
    parser.add_argument("--eval-examples", type=int, default=8, help="--demo: examples per evaluation")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in every process (OMP_NUM_THREADS); 0 keeps torch's default. "
        "On a shared 2-core machine, 1 avoids the stalls of oversubscribed OpenMP threads",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where both the pilot and the user's loop train (the user's campaign declares cpu: on a "
        "GPU machine pass cuda, or the rounds time its CPU)",
    )
    args = parser.parse_args()
    if args.threads:
        # Inherited by the runner processes and the user's loop: pilot and actual run the same way.
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if args.demo:
        return demo(args)
    ratios, held, held_old, held_no_own, drifted, steps, owns = [], 0, 0, 0, [], [], []
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / f"round{i}"
            folder.mkdir()
            r = user_round(folder, args.device)
            ratio = r["predicted"] / r["actual"]
            ratios.append(ratio)
            drifted.append(ratio * r["drift"])
            steps.append(r["step_ratio"])
            inside = r["low"] <= r["actual"] <= r["high"]
            old = r["p10p90"][0] <= r["actual"] <= r["p10p90"][1]
            held, held_old = held + inside, held_old + old
            held_no_own += r["low_without_own"] <= r["actual"] <= r["high"]
            owns.append(r["own"])
            d = r["steady"]
            print(
                f"round {i + 1}: {r['budget']} updates predicted {r['predicted']:.2f} s, range "
                f"{r['low']:.2f}–{r['high']:.2f} s, actual {r['actual']:.2f} s: predicted/actual {ratio:.3f}, "
                f"{'held' if inside else 'MISSED'} (p10–p90 {r['p10p90'][0]:.2f}–{r['p10p90'][1]:.2f} s "
                f"{'held' if old else 'missed'}); steady {d['timed_updates']} updates at "
                f"{d['step_s_mean'] * 1e3:.2f} ± {d['step_s_ci95'] * 1e3:.2f} ms ({d['timing_stopped']}, "
                f"{r['step_ratio']:.3f}× the user's loop's step; {r['own']:.1%} of it the pilot's own loop), "
                f"waited for a CPU {d.get('runqueue_share', 0):.0%}, machine speed moved "
                f"{speed_moved(d.get('speed_reference_s')):.0%} across it; the reference ran {r['drift']:.2f}× as long "
                f"around the actual (predicted/actual at the actual's speed {ratio * r['drift']:.3f}); "
                f"load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    median = statistics.median(ratios)
    print(
        f"at the machine's speed during each actual run (the reference workload's drift divided out): "
        f"median predicted/actual {statistics.median(drifted):.3f}, rounds {min(drifted):.3f}–{max(drifted):.3f}"
    )
    print(
        f"steady's mean step / the user's loop's step after its first update: median {statistics.median(steps):.3f}, "
        f"rounds {min(steps):.3f}–{max(steps):.3f}"
    )
    print(
        f"the pilot's own loop around the model: median {statistics.median(owns):.1%} of steady's step; "
        f"without reaching that much lower the range would have held {held_no_own} of {len(ratios)}"
    )
    within = abs(median - 1) <= 0.05
    enough = held >= 0.9 * len(ratios)
    print(
        f"median predicted/actual {median:.3f} over {len(ratios)} round(s): {'within' if within else 'OUTSIDE'} "
        f"±5 %; the range held the actual in {held} of {len(ratios)} ({'met' if enough else 'NOT met'}: ≥ 90 %), "
        f"p10–p90 of single steps in {held_old} of {len(ratios)} · torch threads {args.threads or 'default'}"
    )
    return 0 if within and enough else 1


def demo(args: argparse.Namespace) -> int:
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
