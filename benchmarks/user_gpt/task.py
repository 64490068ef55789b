"""The pilot's view of the user's run: their GPT (model.py) and their data (data.py), imported
from beside this file, as a user points a campaign at their own code."""

from __future__ import annotations

import torch
from data import CHARS, VOCAB, windows
from model import GPT, GPTConfig

from pilot_tui.tasks.contract import CAUSAL_LM, Task


def collate(examples, max_length: int) -> dict[str, torch.Tensor]:
    # The window's first block characters in; every next character is a target (the pilot shifts).
    ids = torch.tensor([ex["ids"][:max_length] for ex in examples], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def make_task(n_docs: int = 120, block: int = 32, seed: int = 0, **config) -> Task:
    cfg = GPTConfig(block_size=block, vocab_size=VOCAB, **config)
    return Task(
        name="user-gpt",
        kind=CAUSAL_LM,
        examples=windows(n_docs, block, seed),
        build_model=lambda: GPT(cfg),
        collate=collate,
        group_key="doc",
        decode_token=lambda i: CHARS[i] if 0 <= i < VOCAB else f"<{i}>",
        forward=lambda model, batch: model(batch["input_ids"]),
        default_max_length=block,
    )
