"""What the resume check adds to a campaign (target: under 20 s on the demo, CPU).

    .venv/bin/python benchmarks/resume_overhead.py [CAMPAIGN.toml]

Runs the campaign's `steady` phase and its `resume` phase in one runner and prints, side by side,
the resume phase's wall time, its parts, and the cost of the same number of updates in `steady`,
so the overhead of saving + a new process + comparing reads as a ratio, not a bare figure.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from pilot_tui import DEMO_CAMPAIGN
from pilot_tui.session.driver import Session


def _builtin(spec: Path) -> bool:
    return "builtin" in tomllib.loads(spec.read_text()).get("task", {})


def main() -> int:
    spec = Path(sys.argv[1]) if len(sys.argv) > 1 else DEMO_CAMPAIGN
    with tempfile.TemporaryDirectory() as records:
        # A private copy: the resume worker refuses a campaign file edited while the check runs.
        copy = Path(records) / spec.name
        copy.write_text(spec.read_text())
        session = Session(copy if _builtin(copy) else spec, records)
        session.start()
        rows = {}
        try:
            for key in ("first_step", "steady", "resume"):
                for _ in session.run_step(key):
                    pass
                rows[key] = session.record.phases[-1]
        finally:
            session.close()
    resume, steady = rows["resume"], rows["steady"]
    d = resume["details"]
    if "timings_s" not in d:
        print(f"resume: {resume['verdict']}: {resume['reason']}")
        return 1
    k, n = d["k"], d["n"]
    per_update = steady["details"]["step_time_s"]
    t = d["timings_s"]
    print(
        f"campaign {spec} · load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs · {time.ctime()}"
    )
    print(
        f"resume phase (k={k}, n={n}, {d['updates_per_epoch']} updates/epoch, crosses epoch: "
        f"{d['crosses_epoch_boundary']}): {resume['duration_s']:.2f} s wall"
    )
    print(f"  train k in runner      {t['train_k_s']:7.2f} s")
    print(f"  save checkpoint        {t['save_s']:7.2f} s")
    print(f"  uninterrupted n        {t['uninterrupted_n_s']:7.2f} s")
    inside = d["new_process"].get("inside_s", {})
    print(
        f"  new process            {t['new_process_s']:7.2f} s  (inside: setup+load "
        f"{inside.get('setup_and_load', 0):.2f} s, train {inside.get('train', 0):.2f} s; the rest is "
        "interpreter + torch import)"
    )
    print(f"same k+n updates in steady: {per_update * (k + n):.2f} s ({per_update * 1000:.1f} ms/update)")
    print(f"ratio resume phase / (k+n) steady updates: {resume['duration_s'] / (per_update * (k + n)):.1f}x")
    print(f"verdict: {resume['verdict']} {resume['reason']} · under 20 s: {resume['duration_s'] < 20}")
    return 0 if resume["verdict"] == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
