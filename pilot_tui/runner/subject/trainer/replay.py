"""What `export` keeps and `final` compares: the model's logits on one row and its greedy replies
to the `[replay] inputs` — computed the same way on the exported model (in the runner) and on
the reloaded one (in a new process, `reload_worker.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

# Tokens generated per replayed input at most (a reply stops at an end token before).
BUDGET = 16


def prompt_ids(tok: Any, text: str, chat: bool = True) -> list[int]:
    """A replayed input as the model is served it: the chat template's user turn when there is one
    (and the model generates: a classifier reads the text as it was tokenised for training)."""
    if chat and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return [int(i) for i in ids]
    return [int(i) for i in tok(text)["input_ids"]]


def greedy(model: torch.nn.Module, prompt: list[int], stops: set[int], budget: int = BUDGET) -> list[int]:
    """The reply's token ids, one argmax at a time (no sampling, no cache: the same on both sides).
    An encoder-decoder reads the prompt in its encoder and grows its decoder from the start token."""
    device = next(model.parameters()).device
    config = getattr(model, "config", None)
    source = torch.tensor([prompt], device=device)
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    seq = torch.tensor([[int(config.decoder_start_token_id or 0)]], device=device) if seq2seq else source

    def step(s: torch.Tensor) -> Any:
        return model(input_ids=source, decoder_input_ids=s) if seq2seq else model(input_ids=s)

    out: list[int] = []
    with torch.no_grad():
        for _ in range(budget):
            nxt = int(step(seq).logits[0, -1].argmax())
            out.append(nxt)
            if nxt in stops:
                break
            seq = torch.cat([seq, torch.tensor([[nxt]], device=device)], 1)
    return out


def view(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], prompts: list[list[int]], stops: set[int]
) -> tuple[torch.Tensor, list[list[int]]]:
    """(logits on `batch`, greedy reply ids per prompt), in eval mode, the mode put back after."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        if logits.dim() == 2:  # a sequence classifier: its reply to an input is the class it predicts
            replies = [
                [int(model(input_ids=torch.tensor([p], device=device)).logits.argmax(-1))] for p in prompts
            ]
        else:
            replies = [greedy(model, p, stops) for p in prompts]
    model.train(was)
    return logits, replies


def reload_export(path: Path, adapter_only: bool, model_class: str = "") -> torch.nn.Module:
    """The exported folder as a user loads it: `from_pretrained` (the adapter onto its base)."""
    if adapter_only:
        # peft is in the hf extra, and only a trainer that trains an adapter needs it.
        from peft import AutoPeftModelForCausalLM

        return AutoPeftModelForCausalLM.from_pretrained(str(path))
    cls = getattr(transformers, model_class, None) or transformers.AutoModelForCausalLM
    return cls.from_pretrained(str(path), use_safetensors=True)  # never a pickle fallback
