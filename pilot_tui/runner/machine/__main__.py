"""`python -m pilot_tui.runner.machine REQUEST_JSON`: the machine check in a process of its own.

`pilot-tui machine [CAMPAIGN]` starts it (the view side never imports torch), and so does the
`machine` phase on a GPU box: measuring every GPU creates a CUDA context on each, which must not
stay in the runner's process. The request is `{"campaign": PATH}` (or `{}`: the machine alone,
writing beside the current folder) or `{"request": …}` (a request the phase built). The result
is one JSON line on stdout; bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

from ...core.reasons import message_line

EXIT_BAD_INPUT = 2


def campaign_request(path: Path, records: Path | None) -> Any:
    """A campaign's request: its loader, its writes, its largest batch if its task loads here."""
    # After main() silenced library warnings: one printed while a task imports would break the one-line error.
    from ...core.spec import load_spec
    from ...tasks.loader import load_task
    from .batch import largest_batch_bytes
    from .campaign import request_for

    loaded = load_spec(path)
    records_dir = records or Path(loaded.path).parent / "records"
    batch_bytes, unknown = None, ""
    if loaded.spec.task.captures_trainer:
        unknown = (
            "a trainer script's batches exist only once it runs: the campaign's machine phase measures them"
        )
    else:
        try:
            task = load_task(loaded)
            max_length = loaded.spec.batch.max_length or task.default_max_length
            batch_bytes, _ = largest_batch_bytes(
                task, range(len(task.examples)), loaded.spec.batch.microbatch, max_length
            )
        except Exception as exc:  # a task that does not load here: the rest of the check still runs
            unknown = f"the task did not load: {message_line(exc)}"
    return request_for(loaded, records_dir, batch_bytes=batch_bytes, batch_unknown=unknown)


def run(data: dict[str, Any]) -> dict[str, Any]:
    # After main() silenced library warnings: one printed while a task imports would break the one-line error.
    import torch

    from .check import MachineRequest, default_places, run_check
    from .host import Place

    if "request" in data:
        request = MachineRequest.from_json(data["request"])
    elif data.get("campaign"):
        request = campaign_request(
            Path(data["campaign"]), Path(data["records"]) if data.get("records") else None
        )
    else:
        request = MachineRequest(
            places=default_places(Place("checkpoints", Path.cwd(), None, "no campaign given"))
        )
    boundary = None
    if torch.cuda.is_available() and not data.get("host_only"):
        from .cuda import CudaNvml  # NVML and CUDA only where a GPU is

        boundary = CudaNvml()
    result = run_check(request, boundary)
    return {"verdict": result.verdict, "reason": result.reason, "details": result.details}


def main(argv: list[str] | None = None) -> int:
    # The errors told as bad input; the task loader imports torch (see run).
    from ...core.spec import SpecError
    from ...tasks.loader import TaskError

    args = sys.argv[1:] if argv is None else argv
    warnings.filterwarnings("ignore")  # a library warning must not break the one-line error
    try:
        result = run(json.loads(args[0]) if args else {})
    except (SpecError, TaskError, ValueError, KeyError) as exc:
        print(f"pilot-tui: error: {message_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
