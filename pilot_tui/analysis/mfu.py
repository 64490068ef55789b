"""Model FLOPs utilisation: the training step's model FLOPs per second against the GPU's dense
peak (pure, no torch).

Model FLOPs per token of a dense transformer, the approximation MFU is quoted in (PaLM, appendix B;
torchtitan): forward 2·N, backward 2·N through the activations plus 2·T for the trainable
weights' gradients — 6·N when every parameter trains, less for a frozen base (LoRA). Attention's
sequence-length term is left out, as those figures leave it out, so a long-context run reads a
little low. The peak is the dense one for the step's precision (analysis/machine/references.py).
"""

from __future__ import annotations

from typing import Any

from .machine.references import gpu_reference

# What a well-tuned large run reaches, to read the figure against (torchtitan's published
# Llama 3 8B FSDP2 runs on H100: docs/performance.md of pytorch/torchtitan).
EXPECTED_BAND = (
    "33–39 % for an 8B dense model under FSDP2 on H100 (torchtitan); a small model reads far lower"
)


def flops_per_token(parameters: int, trainable: int) -> float:
    return 4.0 * parameters + 2.0 * trainable


def mfu(
    tokens_per_s: float | None,
    parameters: int,
    trainable: int,
    device_name: str | None,
    precision: str,
    tf32: bool = False,
) -> dict[str, Any]:
    """The figure and what it was measured against; no `mfu` key (a record holds no None) where
    there is no peak to compare with, and `why` says so."""
    out: dict[str, Any] = {"flops_per_token": flops_per_token(parameters, trainable)}
    if not tokens_per_s or tokens_per_s <= 0:
        return out | {"why": "no tokens per second measured (not a token model)"}
    achieved = out["flops_per_token"] * tokens_per_s
    out["model_tflops"] = round(achieved / 1e12, 6)
    if device_name is None:
        return out | {"why": "a CPU: no dense peak to compare with"}
    ref = gpu_reference(device_name)
    if ref is None:
        return out | {"why": f"no datasheet peak known for {device_name}"}
    peak, column = ref.peak_tflops(precision, tf32)
    if not peak:
        return out | {"why": f"{ref.model} has no {precision} tensor-core peak"}
    return out | {
        "mfu": round(achieved / (peak * 1e12), 5),
        "peak_tflops": peak,
        "peak": f"{ref.model} {column} {peak:g} TFLOP/s ({ref.source})",
        "expected": EXPECTED_BAND,
    }
