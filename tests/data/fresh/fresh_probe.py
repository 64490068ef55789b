"""What a fresh process finds when it starts: run as `python -m fresh_probe OUT_DIR [PLANT]`.

Writes result.json: whether torch carries a planted attribute, torch's and numpy's first draws,
its parent, and how many objects it found frozen out of the garbage collector; with PLANT, it then plants its own (a later fresh process must not see it)."""

import gc
import json
import os
import sys
from pathlib import Path

import numpy
import torch

out = Path(sys.argv[1])
found = getattr(torch, "_planted_by_a_run", None)
result = {
    "planted": found,
    "torch_seed": torch.initial_seed(),
    "torch_draw": torch.rand(1).item(),
    "numpy_draw": float(numpy.random.rand()),
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "cwd": os.getcwd(),
    "frozen": gc.get_freeze_count(),
}
if len(sys.argv) > 2:
    torch._planted_by_a_run = sys.argv[2]
    torch.manual_seed(99)
(out / "result.json").write_text(json.dumps(result))
