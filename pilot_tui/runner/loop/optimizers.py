"""The optimizers a campaign may name (`optim.name`, or a variant's `optimizer`): one builder each.

Every optimizer of the runner is built here — training states, the fake-tensor estimate and the
stack's check — so the state a first step allocates, the state the estimate counts and the
class the stack imports are the same one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...core.dimensions import OPTIMIZERS

# SGD as people run it: with momentum, one buffer per parameter (without, it keeps no state).
SGD_MOMENTUM = 0.9

Builder = Callable[[Sequence[torch.nn.Parameter], float, float, bool | None], torch.optim.Optimizer]


def _adamw(
    params: Sequence[Any], lr: float, weight_decay: float, foreach: bool | None
) -> torch.optim.Optimizer:
    # foreach None: torch's own default for the device (what the runner always ran).
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=foreach)


def _adamw_fused(
    params: Sequence[Any], lr: float, weight_decay: float, foreach: bool | None
) -> torch.optim.Optimizer:
    # One fused kernel per step instead of foreach's parameter-sized temporaries.
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


def _sgd(
    params: Sequence[Any], lr: float, weight_decay: float, foreach: bool | None
) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM, weight_decay=weight_decay, foreach=foreach)


def _adafactor(
    params: Sequence[Any], lr: float, weight_decay: float, foreach: bool | None
) -> torch.optim.Optimizer:
    # Factored second moments (a row and a column vector per matrix), no first moment.
    return torch.optim.Adafactor(params, lr=lr, weight_decay=weight_decay, foreach=foreach)


BUILDERS: dict[str, Builder] = {
    "adamw": _adamw,
    "adamw_fused": _adamw_fused,
    "sgd": _sgd,
    "adafactor": _adafactor,
}
# The torch class each one needs: the stack checks the installed torch has it.
CLASSES = {"adamw": "AdamW", "adamw_fused": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}
# What runs where a fused kernel is not supported on the device.
FALLBACK = {"adamw_fused": "adamw"}

if set(BUILDERS) != set(OPTIMIZERS) or set(CLASSES) != set(OPTIMIZERS):
    raise RuntimeError(
        f"optimizer builders {sorted(BUILDERS)} differ from the spec's names {sorted(OPTIMIZERS)} "
        "(core/dimensions.py)"
    )


def build(
    name: str,
    params: Sequence[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
    foreach: bool | None = None,
) -> torch.optim.Optimizer:
    """The named optimizer over `params`; KeyError names the known ones."""
    if name not in BUILDERS:
        raise KeyError(f"unknown optimizer {name!r} (known: {', '.join(BUILDERS)})")
    return BUILDERS[name](list(params), lr, weight_decay, foreach)


def missing_class(name: str) -> str:
    """'' when the installed torch has the optimizer's class, else why not."""
    cls = CLASSES.get(name, "")
    if not hasattr(torch.optim, cls):
        return f"torch {torch.__version__} has no torch.optim.{cls}"
    return ""


def probe(name: str, device: torch.device) -> dict[str, Any]:
    """Build the optimizer on a tiny layer on the device and take one step; what happened."""
    out: dict[str, Any] = {"optimizer": name, "ok": True, "error": ""}
    missing = missing_class(name)
    if missing:
        return out | {"ok": False, "error": missing}
    # The probe's random weights must not move the RNG the campaign's phases draw from.
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            layer = torch.nn.Linear(8, 8).to(device)
            optimizer = build(name, list(layer.parameters()), lr=1e-3, weight_decay=0.0)
            layer(torch.randn(4, 8, device=device)).sum().backward()
            optimizer.step()
    except Exception as exc:  # e.g. fused=True on a device without its kernel
        text = str(exc).strip().splitlines()
        return out | {"ok": False, "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:300]}
    return out


def runnable(name: str, device: torch.device) -> tuple[str, str]:
    """(the optimizer that will run on `device`, a note when it is not the one asked for).

    A fused kernel the device lacks falls back to its unfused twin, and the row says so.
    """
    fallback = FALLBACK.get(name)
    if fallback is None:
        return name, ""
    result = _probed(name, device.type)
    if result["ok"]:
        return name, ""
    return fallback, f"{name} does not run on {device.type} ({result['error']}): runs as {fallback}"


_PROBES: dict[tuple[str, str], dict[str, Any]] = {}


def _probed(name: str, device_type: str) -> dict[str, Any]:
    """probe(), once per optimizer and device type in this process (every config() asks)."""
    key = (name, device_type)
    if key not in _PROBES:
        _PROBES[key] = probe(name, torch.device(device_type))
    return _PROBES[key]
