"""Replay the campaign's replay inputs through a model (R16).

The same function runs in the runner on the in-memory model at export time ("before") and in a
fresh process on the reloaded artifact ("after"), so the two outputs are comparable bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...core.reasons import exception_line
from ...tasks.contract import CAUSAL_LM, Task
from ..checks import objective
from .training import to_device

# When a causal-LM replay input has no response part to size the generation on.
DEFAULT_NEW_TOKENS = 16


@dataclass
class ReplayOutput:
    """What one replay input produced: readable output, ids, and the raw logits."""

    input: str
    output: str
    ids: list[int] = field(default_factory=list)
    logits: torch.Tensor | None = None
    how: str = ""
    error: str = ""


def _decode(task: Task, ids: Sequence[int]) -> str:
    if task.decode_token is None:
        return " ".join(str(i) for i in ids)
    return "".join(task.decode_token(int(i)) for i in ids)


def _greedy(task: Task, model: torch.nn.Module, prompt: torch.Tensor, budget: int) -> list[int]:
    """Greedy decoding, one token at a time, from the prompt ids (1-D, on the model's device);
    it stops after the task's end-of-turn / EOS token, which is part of the reply."""
    seq = prompt.clone()
    out: list[int] = []
    stops = set(task.stop_ids)
    for _ in range(budget):
        batch = {"input_ids": seq[None], "attention_mask": torch.ones_like(seq)[None]}
        logits = objective.forward(task, model, batch)
        nxt = int(logits[0, -1].argmax())
        out.append(nxt)
        if nxt in stops:
            break
        seq = torch.cat([seq, torch.tensor([nxt], device=seq.device, dtype=seq.dtype)])
    return out


def _budget(task: Task, length: int, prompt_len: int, max_length: int) -> int:
    """Tokens to generate. A task that names its stop tokens generates until one comes (at most
    `max_new_tokens`); otherwise as many as the replay example's own response holds."""
    if task.stop_ids:
        return max(1, task.max_new_tokens or DEFAULT_NEW_TOKENS)
    return length - prompt_len or max(0, min(DEFAULT_NEW_TOKENS, max_length - prompt_len))


def _one(
    task: Task, model: torch.nn.Module, text: str, max_length: int, device: torch.device
) -> ReplayOutput:
    if task.encode_replay is None:
        return ReplayOutput(text, "", error="the task defines no encode_replay")
    try:
        example = task.encode_replay(text)
        batch = to_device(task.collate([example], max_length), device)
    except Exception as exc:  # a bad replay input is reported on its row, not a crash
        return ReplayOutput(text, "", error=exception_line(exc))
    logits = objective.forward(task, model, batch)[0]
    if task.kind != CAUSAL_LM:
        cls = int(logits.argmax())
        names = task.class_names or ()
        name = names[cls] if cls < len(names) else str(cls)
        return ReplayOutput(text, name, [cls], logits.detach().float().cpu(), "class")
    ids = batch["input_ids"][0]
    length = int(batch["attention_mask"][0].sum()) if "attention_mask" in batch else ids.numel()
    prompt_len = int(batch["prompt_length"][0]) if "prompt_length" in batch else length
    prompt_len = max(1, min(prompt_len, length))
    # Generate as many tokens as the replay example's own response holds (its end token
    # included), so outputs are comparable without knowing the tokenizer's stop token.
    budget = _budget(task, length, prompt_len, max_length)
    try:
        new = _greedy(task, model, ids[:prompt_len], budget)
        how = "greedy"
    except Exception:
        # A task whose forward needs more than input ids: fall back to the teacher-forced argmax.
        new = [int(t) for t in logits[prompt_len - 1 : length - 1].argmax(-1)]
        how = "teacher-forced argmax"
    return ReplayOutput(text, _decode(task, new), new, logits[:length].detach().float().cpu(), how)


@torch.no_grad()
def replay_inputs(
    task: Task, model: torch.nn.Module, inputs: Sequence[str], max_length: int, device: torch.device
) -> list[ReplayOutput]:
    """Every replay input through the model in eval mode, full precision, no randomness."""
    was_training = model.training
    model.eval()
    try:
        return [_one(task, model, text, max_length, device) for text in inputs]
    finally:
        model.train(was_training)
