"""Command line: `pilot-tui [CAMPAIGN|RECORD]`, `pilot-tui run CAMPAIGN --headless`, …

Exit codes: 0 every gate passed, 1 a gate failed, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import DEMO_CAMPAIGN
from .record import RecordError
from .session import BadInputError, Session
from .spec import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
SUBCOMMANDS = ("run", "open")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pilot-tui",
        description="Pilot a PyTorch training campaign phase by phase before renting GPUs for days.",
    )
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a campaign (TUI, or --headless for one line per phase)")
    run.add_argument("campaign", type=Path, help="campaign spec (TOML)")
    run.add_argument("--headless", action="store_true", help="no TUI: print one line per phase")
    run.add_argument("--records", type=Path, help="folder for records (default: <campaign dir>/records)")
    opn = sub.add_parser("open", help="open the dashboard on a campaign or a saved record (default)")
    opn.add_argument("target", type=Path, nargs="?", default=DEMO_CAMPAIGN, help="campaign spec or record")
    opn.add_argument("--records", type=Path, help="folder for records (default: <campaign dir>/records)")
    return p


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if not args_in or (args_in[0] not in SUBCOMMANDS and args_in[0] not in ("-h", "--help")):
        args_in = ["open", *args_in]
    args = _parser().parse_args(args_in)
    try:
        if args.command == "run" and args.headless:
            from .headless import run_headless

            return run_headless(Session(args.campaign, args.records))
        target = args.campaign if args.command == "run" else args.target
        return _open_tui(target, args.records, autorun=args.command == "run")
    except (SpecError, BadInputError, RecordError) as exc:
        print(f"pilot-tui: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("pilot-tui: interrupted; the record holds every phase finished so far", file=sys.stderr)
        return 130


def _open_tui(target: Path, records: Path | None, autorun: bool) -> int:
    try:
        from .tui.app import PilotApp
    except ImportError:
        print(
            "pilot-tui: the dashboard is not available in this build; use `run CAMPAIGN --headless`",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    app = PilotApp(target, records_dir=records, autorun=autorun)
    code = app.run()
    return int(code or 0)
