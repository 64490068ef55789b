"""How well does the plan's time projection predict a real run? (R19 acceptance)

Default: a campaign written the way a user writes one (`benchmarks/user_gpt/`: their own small
GPT in `model.py` and data in `data.py`, imported by `task.py` beside them). Each round:

1. *pilot*, in a fresh runner process: stack, load, first_step, steady (timed to the campaign's
   precision) and eval_longest; the plan computed from that record projects the training time of
   the declared 200 updates, `load + first update + 199 × steady mean step`, and its range,
   `load + first update + 199 × [low, high]` of `analysis/step_time.step_range` (the interval of
   the mean step time, widened by the contention the timed loop measured);
2. *actual*: the user's own plain loop (`user_gpt/train.py`) trains the same model on the same
   data for 200 updates in a fresh process, timed from building the model to the last update.

Prints predicted / actual per round, whether the range held the actual, and beside it whether
the p10–p90 range of single steps (what the plan printed before) would have. Targets: median
predicted / actual within ±5 %, the range holding the actual in ≥ 9 of 10 rounds. Other load
on the machine moves both sides: the load average is printed with each round.

    .venv/bin/python benchmarks/plan_accuracy.py [--rounds 10] [--threads 1]
    .venv/bin/python benchmarks/plan_accuracy.py --demo   # the demo task; the actual is the pilot's own loop
"""

from __future__ import annotations

import argparse
import json
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

from pilot_tui.analysis.plan import compute_plan  # noqa: E402
from pilot_tui.analysis.step_time import step_range  # noqa: E402
from pilot_tui.core.phase_table import in_group  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402

DEMO = REPO / "campaigns" / "demo.toml"
USER = REPO / "benchmarks" / "user_gpt"
PILOT_SKIP = [*in_group("data"), "save", "export", "fit_search", "lr_run", *in_group("closing")]


def write_campaign(folder: Path, name: str, skip: list[str], steady_updates: int | None = None) -> Path:
    raw = tomllib.loads(DEMO.read_text())
    for section in ("variants", "lr_board"):
        raw.pop(section, None)  # the control only: its 200-update budget is the run predicted
    raw["phases"]["skip"] = skip
    if steady_updates is not None:
        # The actual run trains exactly its budget: no timing to a precision.
        raw["phases"] |= {"steady_updates": steady_updates, "steady_precision": 0.0}
    # The actual run is longer than the demo's per-phase time ceiling; the pilot keeps the demo's.
    raw["limits"] = {}
    raw["plan"] = dict(raw.get("plan", {}), dataset_size=0, priority=["control"])
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


def one_round(folder: Path) -> tuple[float, float, dict[str, Any]]:
    pilot_skip = PILOT_SKIP
    pilot = run_steps(write_campaign(folder, "pilot", pilot_skip), folder / "records")
    plan = compute_plan(pilot)
    budget = int(pilot["accounting"]["updates"])
    if plan["sheet"]["kept"] != "control":
        raise SystemExit(f"the pilot kept no configuration: {plan['sheet']['kept_reason']}")
    (control,) = [o for o in plan["package"]["order"] if o["id"] == "control"]
    assert control["updates"] == budget, (control["updates"], budget)
    predicted = float(control["train_s"])

    # The same process start as the pilot (stack first, so torch warm-up lands in the same place).
    actual_skip = ["eval_longest", *pilot_skip]
    actual_data = run_steps(
        write_campaign(folder, "actual", actual_skip, steady_updates=budget - 1), folder / "records"
    )
    rows = {r["step"]: r for r in actual_data["phases"]}
    failed = [k for k, r in rows.items() if r["verdict"] == "fail"]
    if failed:
        raise SystemExit(f"the actual run failed in {failed}: {[rows[k]['reason'] for k in failed]}")
    assert rows["steady"]["details"]["updates"] + 1 == budget
    actual = sum(float(rows[k]["duration_s"]) for k in ("load", "first_step", "steady"))
    steady = next(r for r in pilot["phases"] if r["step"] == "steady")["details"]
    info = {
        "budget": budget,
        "pilot_steady_updates": steady["updates"],
        "pilot_step_s": steady["step_time_s"],
        "actual_step_s": rows["steady"]["details"]["step_time_s"],
    }
    return predicted, actual, info


def user_round(folder: Path) -> dict[str, Any]:
    """One pilot of the user's campaign and one run of their own loop, each in a fresh process."""
    raw = tomllib.loads((USER / "campaign.toml").read_text())
    raw["task"]["file"] = str(USER / "task.py")
    raw.setdefault("phases", {})["skip"] = PILOT_SKIP
    campaign = folder / "user-gpt.toml"
    campaign.write_text(tomli_w.dumps(raw))
    pilot = run_steps(campaign, folder / "records")
    failed = [r["step"] for r in pilot["phases"] if r["verdict"] == "fail"]
    if failed:
        raise SystemExit(f"the pilot failed in {failed}")
    plan = compute_plan(pilot)
    (control,) = [o for o in plan["package"]["order"] if o["id"] == "control"]
    budget = int(raw["batch"]["updates"])
    rows = {r["step"]: r for r in pilot["phases"]}
    steady = rows["steady"]["details"]
    fixed = float(rows["load"]["duration_s"]) + float(rows["first_step"]["duration_s"])
    span = step_range(steady)
    assert span is not None, "the steady row recorded no interval"
    b = raw["batch"]
    out = subprocess.run(
        [
            sys.executable,
            str(USER / "train.py"),
            f"--updates={budget}",
            f"--microbatch={b['microbatch']}",
            f"--accumulation={b['accumulation']}",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=USER,
    )
    actual = float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
    return {
        "predicted": float(control["train_s"]),
        "low": fixed + (budget - 1) * span.low_s,
        "high": fixed + (budget - 1) * span.high_s,
        "p10p90": (
            fixed + (budget - 1) * steady["step_time_p10_s"],
            fixed + (budget - 1) * steady["step_time_p90_s"],
        ),
        "actual": actual,
        "budget": budget,
        "steady": steady,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--demo", action="store_true", help="the demo task against the pilot's own loop")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in every process (OMP_NUM_THREADS); 0 keeps torch's default. "
        "On a shared 2-core machine, 1 avoids the stalls of oversubscribed OpenMP threads",
    )
    args = parser.parse_args()
    if args.threads:
        # Inherited by the runner processes and the user's loop: pilot and actual run the same way.
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if args.demo:
        return demo(args)
    ratios, held, held_old = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / f"round{i}"
            folder.mkdir()
            r = user_round(folder)
            ratio = r["predicted"] / r["actual"]
            ratios.append(ratio)
            inside = r["low"] <= r["actual"] <= r["high"]
            old = r["p10p90"][0] <= r["actual"] <= r["p10p90"][1]
            held, held_old = held + inside, held_old + old
            d = r["steady"]
            print(
                f"round {i + 1}: {r['budget']} updates predicted {r['predicted']:.2f} s, range "
                f"{r['low']:.2f}–{r['high']:.2f} s, actual {r['actual']:.2f} s: predicted/actual {ratio:.3f}, "
                f"{'held' if inside else 'MISSED'} (p10–p90 {r['p10p90'][0]:.2f}–{r['p10p90'][1]:.2f} s "
                f"{'held' if old else 'missed'}); steady {d['timed_updates']} updates at "
                f"{d['step_s_mean'] * 1e3:.2f} ± {d['step_s_ci95'] * 1e3:.2f} ms ({d['timing_stopped']}), "
                f"waited for a CPU {d.get('runqueue_share', 0):.0%}; load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    median = statistics.median(ratios)
    within = abs(median - 1) <= 0.05
    enough = held >= 0.9 * len(ratios)
    print(
        f"median predicted/actual {median:.3f} over {len(ratios)} round(s): {'within' if within else 'OUTSIDE'} "
        f"±5 %; the range held the actual in {held} of {len(ratios)} ({'met' if enough else 'NOT met'}: ≥ 90 %), "
        f"p10–p90 of single steps in {held_old} of {len(ratios)} · torch threads {args.threads or 'default'}"
    )
    return 0 if within and enough else 1


def demo(args: argparse.Namespace) -> int:
    ratios = []
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / f"round{i}"
            folder.mkdir()
            predicted, actual, info = one_round(folder)
            ratio = predicted / actual
            ratios.append(ratio)
            print(
                f"round {i + 1}: {info['budget']}-update run predicted {predicted:.2f} s, actual {actual:.2f} s, "
                f"predicted/actual {ratio:.3f}  (pilot steady {info['pilot_steady_updates']} updates at "
                f"{info['pilot_step_s'] * 1000:.2f} ms, actual steady {info['actual_step_s'] * 1000:.2f} ms; "
                f"load average {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    median = statistics.median(ratios)
    within = abs(median - 1) <= 0.10
    print(
        f"median predicted/actual {median:.3f} over {len(ratios)} round(s): "
        f"{'within' if within else 'OUTSIDE'} ±10 % (torch threads: {args.threads or 'default'})"
    )
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
