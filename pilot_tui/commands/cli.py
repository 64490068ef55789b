"""Command line: `pilot-tui [CAMPAIGN|RECORD]`, `pilot-tui run CAMPAIGN --headless`, …

Exit codes: 0 every gate passed, 1 a gate failed, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .. import DEMO_CAMPAIGN, __version__
from ..core.launch import module_command
from ..core.notes import add_note, set_conclusion
from ..core.record import Record, RecordError
from ..core.spec import SpecError
from ..core.text import one_line
from ..session.driver import BadInputError, Session, continue_session
from .archive import task_file_state, write_archive
from .estimate import add_parser as add_estimate
from .estimate import run_estimate
from .headless import run_headless
from .machine import add_parser as add_machine
from .machine import run_machine
from .plan import print_plan
from .report import print_compare, write_report

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# The dashboard itself failed (a bug): never 0, and not a gate's verdict either.
EXIT_CRASH = 3
SUBCOMMANDS = (
    "run",
    "open",
    "continue",
    "archive",
    "export",
    "plan",
    "report",
    "compare",
    "note",
    "conclude",
    "init",
    "estimate",
    "machine",
    "agent",
)
# `export` is the phase that writes the artifact; the command that archives a record was called
# `export` before it was `archive`, and still answers to the old name.
OLD_ARCHIVE_NAME = "export"
# `pilot-tui plan` flags: (flag, [plan] key, help).
SCHEDULE_FLAGS = (
    ("--save-every", "save_every", "updates between checkpoint saves in the real run"),
    ("--keep", "keep", "checkpoints kept on disk (0: every one)"),
    ("--eval-every", "eval_every", "updates between evaluations"),
    ("--eval-examples", "eval_examples", "examples per evaluation"),
    ("--restarts", "restarts", "restarts from the last checkpoint to allow for"),
)


def _count(text: str) -> int:
    """A whole number ≥ 0 (argparse names the flag when it is not)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def _amount(what: str) -> Callable[[str], float]:
    """An argparse type: a finite number ≥ 0 of `what` (a price, hours), named when it is not."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0 ({what}), got {text}")
        return value

    return parse


_price = _amount("a price in USD per GPU-hour")
_hours = _amount("a number of hours")


def _gpu_price(text: str) -> tuple[str, float]:
    """GPU=USD: a GPU's name (as in H100, L40S, RTX 4090) and its price per GPU-hour."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected GPU=USD_PER_HOUR (e.g. H100=2.5), got {text!r}")
    return name.strip(), _price(value)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pilot-tui",
        description="Pilot a PyTorch training campaign phase by phase before renting GPUs for days.",
    )
    p.add_argument("--version", action="version", version=f"pilot-tui {__version__}")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a campaign (TUI, or --headless for one line per phase)")
    run.add_argument("campaign", type=Path, help="campaign spec (TOML)")
    run.add_argument("--headless", action="store_true", help="no TUI: print one line per phase")
    run.add_argument("--records", type=Path, help="folder for records (default: <campaign dir>/records)")
    run.add_argument(
        "--keep-going",
        action="store_true",
        help="headless: run the later phases even after a failed stack check",
    )
    agent = sub.add_parser(
        "agent",
        help="on another node of a multi-node campaign: join the dashboard's groups (headless, no record)",
        add_help=False,
    )
    agent.add_argument("rest", nargs=argparse.REMAINDER)
    opn = sub.add_parser("open", help="open the dashboard on a campaign or a saved record (default)")
    opn.add_argument("target", type=Path, nargs="?", default=DEMO_CAMPAIGN, help="campaign spec or record")
    opn.add_argument("--records", type=Path, help="folder for records (default: <campaign dir>/records)")
    cont = sub.add_parser(
        "continue",
        help="run the steps a record does not hold yet, into that record (e.g. after a dropped SSH)",
    )
    cont.add_argument("record", type=Path)
    cont.add_argument(
        "--keep-going", action="store_true", help="run later phases even after a failed stack check"
    )
    opn.add_argument(
        "--continue",
        dest="continue_record",
        action="store_true",
        help="on a record: run the steps it does not hold yet, into it",
    )
    arc = sub.add_parser(
        "archive",
        aliases=[OLD_ARCHIVE_NAME],
        help="archive a record: spec, metrics, artifact manifest, instructions ('export' is its old name)",
    )
    arc.add_argument("record", type=Path)
    arc.add_argument("--out", type=Path, help="archive folder or .tar.gz (default: beside the record)")
    arc.add_argument("--with-artifacts", action="store_true", help="copy the artifacts too")
    pln = sub.add_parser("plan", help="print the choice sheet and the 3/7/30-day rental plan of a record")
    pln.add_argument("record", type=Path)
    # Another schedule for the same measurements: re-planned without a new pilot.
    for flag, key, what in SCHEDULE_FLAGS:
        pln.add_argument(flag, dest=key, type=_count, metavar="N", help=what)
    pln.add_argument(
        "--max-job-hours",
        dest="max_job_hours",
        type=_hours,
        metavar="H",
        help="the provider ends every job after this many hours (Modal: 24): the run is cut into jobs",
    )
    pln.add_argument(
        "--price",
        dest="prices",
        type=_gpu_price,
        action="append",
        metavar="GPU=USD",
        help="price of one GPU-hour of a candidate GPU (repeatable): e.g. --price H100=2.5 --price L40S=0.9",
    )
    pln.add_argument(
        "--preemptible", dest="preemptible", action="store_true", default=None, help="jobs may be preempted"
    )
    pln.add_argument(
        "--price-per-hour", type=_price, metavar="USD", help="price of one GPU-hour: the decision's cost"
    )
    rep = sub.add_parser(
        "report", help="write one self-contained HTML file of a record: decision, gates, curves, memory, plan"
    )
    rep.add_argument("record", type=Path)
    rep.add_argument("-o", "--out", type=Path, help="HTML file to write (default: the record's name, .html)")
    rep.add_argument("--against", type=Path, metavar="RECORD", help="add what differs from another record")
    rep.add_argument(
        "--price-per-hour", type=_price, metavar="USD", help="price of one GPU-hour: the decision's cost"
    )
    cmp_ = sub.add_parser(
        "compare", help="two records side by side: only what differs (exit 1 when anything does)"
    )
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    note = sub.add_parser("note", help="add an observation to a record (a phase, variant or run)")
    note.add_argument("record", type=Path)
    note.add_argument("text")
    note.add_argument("--on", default="campaign", help="what it is about: a step key, variant or run id")
    con = sub.add_parser("conclude", help="write the campaign's conclusion into its record")
    con.add_argument("record", type=Path)
    con.add_argument("text")
    con.add_argument("--decision", default="", help="the configuration kept, e.g. 'control'")
    _init_parser(sub)
    add_estimate(sub)
    add_machine(sub)
    return p


def _init_parser(sub) -> None:
    ini = sub.add_parser(
        "init",
        help="write a runnable campaign for a local Hugging Face model and a JSONL data file, "
        "or for a Trainer script (--trainer train.py -- ARGS)",
    )
    ini.add_argument("--model", type=Path, help="local model directory (config, tokenizer, weights)")
    ini.add_argument("--data", type=Path, help="JSONL data file")
    ini.add_argument(
        "--trainer",
        metavar="PROGRAM",
        help="a transformers Trainer / TRL SFTTrainer program to pilot unchanged: a .py script, or a "
        "console command (its path or its name: llamafactory-cli); its arguments follow `--`",
    )
    ini.add_argument(
        "--trainer-module",
        metavar="MODULE",
        help="the same for a module run as `python -m MODULE` (e.g. trl.scripts.sft)",
    )
    ini.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="with --trainer: set for the script"
    )
    ini.add_argument(
        "script_args", nargs="*", metavar="-- ARGS", help="with --trainer: the script's arguments"
    )
    ini.add_argument("--out", type=Path, default=Path("campaign.toml"), help="campaign file to write")
    ini.add_argument("--format", choices=("messages", "prompt_completion", "text"), help="default: detected")
    ini.add_argument("--train-on", default="assistant", choices=("assistant", "last_assistant", "all"))
    ini.add_argument("--lr", type=float, help="control LR (default 2e-5, 2e-4 with --lora)")
    ini.add_argument(
        "--lora", action="store_true", help="train a LoRA adapter (peft) instead of every weight"
    )
    ini.add_argument("--fresh-init", action="store_true", help="pretrain from scratch (no weights needed)")
    ini.add_argument("--force", action="store_true", help="overwrite an existing campaign file")


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if not args_in or (args_in[0] not in SUBCOMMANDS and args_in[0] not in ("-h", "--help", "--version")):
        args_in = ["open", *args_in]
    args = _parser().parse_args(args_in)
    if args.command == "init" and (args.trainer or args.trainer_module):
        # Like init below: it reaches the Hugging Face tasks, which no other command loads.
        from .init_trainer import main as init_trainer_main

        return init_trainer_main(args)
    if args.command == "init":
        # Only init reaches the Hugging Face tasks (and through them transformers and torch):
        # every other command starts without them.
        from .init import main as init_main

        return init_main(args)
    if args.command == "agent":
        return _agent(args_in[1:])
    try:
        if args.command == "run" and args.headless:
            return run_headless(Session(args.campaign, args.records), keep_going=args.keep_going)
        if args.command == "estimate":
            return run_estimate(args)
        if args.command == "machine":
            return run_machine(args)
        if args.command == "continue":
            return run_headless(continue_session(args.record), keep_going=args.keep_going)
        if args.command == "open" and args.continue_record:
            return _open_tui(args.target, None, autorun=True, continue_record=True)
        if args.command in ("archive", OLD_ARCHIVE_NAME):
            if args.command == OLD_ARCHIVE_NAME:
                print(
                    "pilot-tui: 'export' is the old name of 'archive' (the export is a phase)",
                    file=sys.stderr,
                )
            print(one_line(write_archive(args.record, args.out, with_artifacts=args.with_artifacts)))
            _warn_task_file(args.record)
            return EXIT_OK
        if args.command == "plan":
            keys = [key for _, key, _ in SCHEDULE_FLAGS] + ["max_job_hours", "preemptible"]
            schedule = {key: getattr(args, key) for key in keys if getattr(args, key) is not None}
            return print_plan(
                args.record,
                schedule=schedule,
                price_per_hour=args.price_per_hour,
                prices=dict(args.prices or []),
            )
        if args.command == "report":
            written = write_report(
                args.record, args.out, against=args.against, price_per_hour=args.price_per_hour
            )
            print(one_line(f"report: {written}"))
            return EXIT_OK
        if args.command == "compare":
            return print_compare(args.a, args.b)
        if args.command in ("note", "conclude"):
            if args.command == "note":
                add_note(args.record, args.on, args.text)
            else:
                set_conclusion(args.record, args.text, decision=args.decision)
            return EXIT_OK
        target = args.campaign if args.command == "run" else args.target
        return _open_tui(target, args.records, autorun=args.command == "run")
    except (SpecError, BadInputError, RecordError) as exc:
        print(f"pilot-tui: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("pilot-tui: interrupted; the record holds every phase finished so far", file=sys.stderr)
        return 130


def _agent(argv: list[str]) -> int:
    """The agent owns torch: it runs as the runner's module, in this process's place."""
    cmd = module_command("pilot_tui.runner.distributed.agent", argv)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130


def _warn_task_file(record_path: Path) -> None:
    """Say it when the archive could not include the task file (edited since the run)."""
    src, _, state = task_file_state(Record.read(record_path))
    if state and src is None:
        print(f"pilot-tui: warning: {one_line(state)}", file=sys.stderr)


def _open_tui(target: Path, records: Path | None, autorun: bool, continue_record: bool = False) -> int:
    # Textual loads for the dashboard only: headless runs and the other commands start without it.
    from ..tui.app import PilotApp

    if continue_record:
        app = PilotApp(source=continue_session(target), autorun=autorun)
    else:
        app = PilotApp(target, records_dir=records, autorun=autorun)
    code = app.run()
    return tui_exit_code(code, app.return_code)


def tui_exit_code(code: object, return_code: int | None) -> int:
    """The app's own exit value, or EXIT_CRASH when Textual ended it on an unhandled exception."""
    if return_code:  # Textual sets it (to 1) when a handler raised: the dashboard crashed
        print(
            "pilot-tui: the dashboard crashed (traceback above); the record holds every phase finished so far",
            file=sys.stderr,
        )
        return EXIT_CRASH
    return int(code or 0)  # type: ignore[call-overload]
