"""Time to a verdict: piloting a training script against running it plainly, side by side.

    .venv/bin/python benchmarks/time_to_verdict.py [--script trl-sft|plain_trainer.py] [--rounds 1]
    .venv/bin/python benchmarks/time_to_verdict.py --demo [--rounds 3]

Each round, on tiny local assets (a 2-layer Llama, chat and prompt-completion data; nothing from a
hub) and the same arguments:

1. *plain*: the script as its user runs it, `python SCRIPT args` (TRL's own `trl/scripts/sft.py`
   from the installed package, run in place; or one of tests/data/trainer_scripts), wall time from
   the command to its exit;
2. *piloted*: `pilot-tui init --trainer SCRIPT -- args` then `pilot-tui run campaign.toml
   --headless`, wall time of the run, with the per-phase breakdown read from its record.

Prints both times, the ratio piloted / plain (target ≤ 1.5), and where the pilot's time went
(each phase's seconds, the fresh processes and how they started or what they started beside, the
work done in forks beside other steps: the estimate, the LR board's runs). The machine's load average is
printed with each round: other work on the machine moves both sides.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "data" / "trainer_scripts"
STEPS = 8


def tiny_assets(folder: Path) -> object:
    spec = importlib.util.spec_from_file_location("tiny_assets", SCRIPTS / "tiny_assets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_assets"] = module
    spec.loader.exec_module(module)
    return module.build(folder)


def trl_sft(tiny: object, folder: Path) -> tuple[Path, list[str]]:
    import trl

    rows = [json.loads(line) for line in Path(tiny.chat).read_text().splitlines()]  # type: ignore[attr-defined]
    data = folder / "data"
    data.mkdir(exist_ok=True)
    cut = int(len(rows) * 0.85)
    for name, part in (("train", rows[:cut]), ("test", rows[cut:])):
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    args = [
        "--model_name_or_path", str(tiny.model),  # type: ignore[attr-defined]
        "--dataset_name", str(data),
        "--output_dir", "out",
        "--max_steps", str(STEPS),
        "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-3",
        "--bf16", "false",
        "--eval_strategy", "steps",
        "--eval_steps", "4",
        "--report_to", "none",
        "--assistant_only_loss", "true",  # chat data: the replies are what is learnt (inspect's gate)
    ]  # fmt: skip
    return Path(trl.__file__).parent / "scripts" / "sft.py", args


def own_script(tiny: object, name: str) -> tuple[Path, list[str]]:
    args = [
        "--model", str(tiny.model),  # type: ignore[attr-defined]
        "--data", str(tiny.prompt_completion),  # type: ignore[attr-defined]
        "--output_dir", "out",
    ]  # fmt: skip
    return SCRIPTS / name, args


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, start_new_session=True)
    return time.perf_counter() - t0, done


def first_verdict_s(record: dict, launched: float) -> float | None:
    """Seconds from the command's launch to the end of the record's first row: what the user
    waits before any verdict (the runner's imports and the campaign's open, then `stack`)."""
    rows = record.get("phases", [])
    if not rows:
        return None
    first = rows[0]
    ended = dt.datetime.fromisoformat(first["started"]).timestamp() + float(first.get("duration_s") or 0)
    return ended - launched


def one_round(script: Path, args: list[str], folder: Path, env: dict[str, str]) -> dict:
    plain_dir, pilot_dir = folder / "plain", folder / "pilot"
    plain_dir.mkdir()
    pilot_dir.mkdir()
    plain_s, plain = timed([sys.executable, str(script), *args], plain_dir, env)
    if plain.returncode != 0:
        raise SystemExit(f"the plain script failed: {plain.stderr[-800:]}")
    cli = [sys.executable, "-m", "pilot_tui"]
    init = subprocess.run(
        [*cli, "init", "--trainer", str(script), "--out", "campaign.toml", "--", *args],
        cwd=pilot_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    if init.returncode != 0:
        raise SystemExit(f"init failed: {init.stdout[-400:]} {init.stderr[-800:]}")
    raw = tomllib.loads((pilot_dir / "campaign.toml").read_text())
    (pilot_dir / "campaign.toml").write_text(tomli_w.dumps(raw))
    launched = time.time()
    pilot_s, run = timed([*cli, "run", "campaign.toml", "--headless", "--records", "records"], pilot_dir, env)
    records = glob.glob(str(pilot_dir / "records" / "*.toml"))
    if not records:
        raise SystemExit(f"the pilot wrote no record: {run.stdout[-800:]} {run.stderr[-800:]}")
    record = tomllib.loads(Path(records[0]).read_text())
    return {
        "plain_s": plain_s,
        "pilot_s": pilot_s,
        "pilot_rc": run.returncode,
        "record": record,
        "first_verdict_s": first_verdict_s(record, launched),
    }


def breakdown(record: dict) -> list[str]:
    rows = record.get("phases", [])
    out = []
    # The wait before the first row, as the runner timed each stage of the campaign's open.
    for stage, seconds in (record.get("environment", {}).get("open_s") or {}).items():
        out.append(f"  open: {stage:<52} {float(seconds):5.2f} s")
    for r in sorted(rows, key=lambda r: -float(r.get("duration_s") or 0)):
        d = r.get("details", {})
        start = (
            d.get("resume_process_start")
            or d.get("reload_process_start")
            or (d.get("capture") or {}).get("process_start")
            or ""
        )
        how = f" ({start.split(' (')[0]})" if start else ""
        ahead = d.get("resume_process_ahead") or d.get("reload_process_ahead")
        if ahead:  # process C, or final's reload, started beside untimed steps
            beside = str(ahead).split("beside ")[-1].split(":")[0].split(",")[0]
            how = f" ({start.split(' (')[0]}, started ahead beside {beside})"
        if d.get("fork_s") is not None:  # the estimate beside the data checks, an LR run beside another
            beside = d.get("beside") or []
            beside = beside if isinstance(beside, str) else " · ".join(beside)
            where = f"beside {beside}" if beside else "started at this step"
            how = f" (waited here; {d['fork_s']:.2f} s in a fork {where})"
        out.append(f"  {r['step']:<24} {float(r.get('duration_s') or 0):7.2f} s {r['verdict']}{how}")
    total = sum(float(r.get("duration_s") or 0) for r in rows)
    out.append(f"  {'sum of rows':<24} {total:7.2f} s")
    return out


def demo_rounds(rounds: int, env: dict[str, str]) -> int:
    """`pilot-tui run campaigns/demo.toml --headless`, wall time from the command to its exit."""
    walls = []
    for i in range(rounds):
        with tempfile.TemporaryDirectory(prefix="time-to-verdict-demo-") as tmp:
            folder = Path(tmp)
            shutil.copy(REPO / "campaigns" / "demo.toml", folder / "demo.toml")
            cli = [
                sys.executable,
                "-m",
                "pilot_tui",
                "run",
                "demo.toml",
                "--headless",
                "--records",
                "records",
            ]
            launched = time.time()
            wall, run = timed(cli, folder, env)
            records = glob.glob(str(folder / "records" / "*.toml"))
            if not records:
                raise SystemExit(f"the demo wrote no record: {run.stdout[-800:]} {run.stderr[-800:]}")
            record = tomllib.loads(Path(records[0]).read_text())
        walls.append(wall)
        first = first_verdict_s(record, launched)
        print(
            f"round {i + 1}: demo headless {wall:.1f} s (exit {run.returncode}; target < 15 s); "
            f"first verdict {first:.1f} s after the launch; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        print("\n".join(breakdown(record)), flush=True)
    walls.sort()
    print(f"median demo headless over {len(walls)} round(s): {walls[len(walls) // 2]:.1f} s (target < 15 s)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--script", default="trl-sft", help="trl-sft, or a file of tests/data/trainer_scripts"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--demo", action="store_true", help="the built-in demo campaign headless instead (target < 15 s)"
    )
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if args.demo:
        return demo_rounds(args.rounds, env)
    ratios: list[float] = []
    times: dict[str, list[float]] = {"pilot": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="time-to-verdict-") as tmp:
        tiny = tiny_assets(Path(tmp) / "tiny")
        for i in range(args.rounds):
            folder = Path(tmp) / f"round{i}"
            folder.mkdir()
            if args.script == "trl-sft":
                script, script_args = trl_sft(tiny, folder)
            else:
                script, script_args = own_script(tiny, args.script)
            r = one_round(script, script_args, folder, env)
            ratio = r["pilot_s"] / r["plain_s"]
            ratios.append(ratio)
            times["pilot"].append(r["pilot_s"])
            times["plain"].append(r["plain_s"])
            print(
                f"round {i + 1}: {script.name}: plain {r['plain_s']:.1f} s, piloted {r['pilot_s']:.1f} s "
                f"(exit {r['pilot_rc']}): piloted / plain {ratio:.2f} (target ≤ 1.5); "
                f"load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            if r["first_verdict_s"] is not None:
                print(
                    f"  first verdict {r['first_verdict_s']:.1f} s after the launch (the runner's "
                    "imports and the campaign's open, then stack)",
                    flush=True,
                )
            print("\n".join(breakdown(r["record"])), flush=True)
    ratios.sort()
    print(f"median piloted / plain over {len(ratios)} round(s): {ratios[len(ratios) // 2]:.2f}")
    if len(ratios) > 1:
        # The plain script's own time moves from run to run: the medians of each side, apart.
        piloted, plain = sorted(times["pilot"]), sorted(times["plain"])
        mid = len(piloted) // 2
        print(
            f"median piloted {piloted[mid]:.1f} s, median plain {plain[mid]:.1f} s: "
            f"ratio of the medians {piloted[mid] / plain[mid]:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
