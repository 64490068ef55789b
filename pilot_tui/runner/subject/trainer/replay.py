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


def served_alone(path: Path, model: torch.nn.Module, adapter_only: bool, ends: list[int]) -> dict[str, Any]:
    """What a server finds in the exported folder alone: a tokenizer (and its chat template),
    a generation config valid under strict validation that stops at the end-of-turn ids, a model
    config that keeps its cache, and weights that are not empty (a sharded save's placeholders)."""
    found: dict[str, Any] = {}
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(path))
        found["tokenizer"] = type(tok).__name__
        found["chat_template"] = bool(getattr(tok, "chat_template", None))
    except Exception as exc:  # none there, or one that does not load: the same for a server
        found["tokenizer_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if (path / "generation_config.json").is_file():
        try:
            gen = transformers.GenerationConfig.from_pretrained(str(path))
            gen.validate(strict=True)
            found["generation_use_cache"] = gen.use_cache  # what generate() reads (transformers 5)
            eos = gen.eos_token_id
            found["generation_eos"] = [
                int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None
            ]
        except Exception as exc:
            found["generation_config_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    config = getattr(model, "config", None)
    if config is not None and not adapter_only:
        found["use_cache"] = getattr(config, "use_cache", None)
        eos = getattr(config, "eos_token_id", None)
        found["config_eos"] = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
    found["ends"] = list(ends)
    found["empty_tensors"] = [n for n, p in model.named_parameters() if p.numel() == 0][:10]
    return found
