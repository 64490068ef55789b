"""How well does the plan's time projection predict a real run? (R19 acceptance)

For each round, in fresh runner processes (as a rental run would start):

1. *pilot*: the demo's stack, load, first_step and steady phases (the demo's `steady_updates`),
   then the plan computed from that record: its training projection for the demo's declared budget
   of 200 updates is `load + first update + 199 × steady mean step time`;
2. *actual*: the same configuration trains 200 updates for real — load, first_step, then the
   steady loop for the 199 remaining updates — and its measured durations are summed.

Prints predicted / actual per round and the median ratio. Target: within ±10 % on this CPU.
Other processes on the machine slow both sides unevenly: the load average is printed with each round.

    .venv/bin/python benchmarks/plan_accuracy.py [--rounds 3] [--threads N]
"""

from __future__ import annotations

import argparse
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

from pilot_tui.analysis.plan import compute_plan  # noqa: E402
from pilot_tui.core.phase_table import in_group  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402

DEMO = REPO / "campaigns" / "demo.toml"


def write_campaign(folder: Path, name: str, skip: list[str], steady_updates: int | None = None) -> Path:
    raw = tomllib.loads(DEMO.read_text())
    for section in ("variants", "lr_board"):
        raw.pop(section, None)  # the control only: its 200-update budget is the run predicted
    raw["phases"]["skip"] = skip
    if steady_updates is not None:
        raw["phases"]["steady_updates"] = steady_updates
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
    pilot_skip = [*in_group("data"), "save", "export", "lr_run", *in_group("closing")]
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
    args = parser.parse_args()
    if args.threads:
        # Inherited by the runner processes the sessions spawn: pilot and actual run the same way.
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
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
