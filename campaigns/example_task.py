"""An example user task: a tiny character-level model learning two-number addition.

This file is what a campaign's `[task] file = "example_task.py"` points at. It is plain Python: the
runner imports it, calls `make_task(**options)` and gets a `pilot_tui.tasks.contract.Task` back.
Everything is built here — the data (generated, deterministic), the tokenizer, the model and the
collate — so the file is a complete template to copy for your own task.

The unit of leakage is the *worksheet*: each sheet practises one first operand (`37+12=`,
`37+80=`, …), so problems of one sheet are near-duplicates and must stay in one split. The
campaign says so with `group_key = "sheet"`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Example, Task

# --- the tokenizer: one id per character, three specials first --------------------------------

CHARS = "0123456789+="
PAD, BOS, EOS = 0, 1, 2
OFFSET = 3
VOCAB = OFFSET + len(CHARS)
IGNORE = -100  # the label of a token that does not count in the loss


def encode(text: str) -> list[int]:
    return [OFFSET + CHARS.index(c) for c in text]


def decode_token(token: int) -> str:
    """A readable piece for one token id: the batch inspection shows it token by token."""
    specials = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>"}
    if token in specials:
        return specials[token]
    if OFFSET <= token < VOCAB:
        return CHARS[token - OFFSET]
    return f"<{token}>"


# --- the data: every example holds its group key field ------------------------------------------


def generate(n_sheets: int, per_sheet: int, seed: int) -> list[dict[str, Any]]:
    """Same arguments, same list. Operands are drawn without replacement, so no two examples are
    identical and no problem appears on two sheets (the split check would flag it)."""
    if not 1 <= n_sheets <= 90 or not 1 <= per_sheet <= 100:
        raise ValueError(f"n_sheets must be in 1..90 and per_sheet in 1..100, got {n_sheets}, {per_sheet}")
    rng = random.Random(seed)
    examples = []
    for s, a in enumerate(rng.sample(range(10, 100), n_sheets)):
        for i, b in enumerate(rng.sample(range(100), per_sheet)):
            examples.append(
                {
                    "id": f"sheet{s:02d}-{i}",
                    "sheet": f"sheet{s:02d}",
                    "prompt": f"{a}+{b}=",
                    "answer": str(a + b),
                }
            )
    return examples


# --- the batch exactly as the model gets it -------------------------------------------------------


def collate(examples: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
    """`<bos> 37+12= 49 <eos>`: the prompt is masked from the loss, the answer and `<eos>` count.

    `labels` are aligned with `input_ids`; the runner shifts by one (position t predicts t + 1).
    `prompt_length` and `raw_length` are the untruncated counts, so the inspection can tell
    whether prompt tokens are supervised and whether truncation cut an answer.
    """
    rows, labels, prompt_lengths, raw_lengths = [], [], [], []
    for ex in examples:
        prompt = [BOS, *encode(ex["prompt"])]
        answer = [*encode(ex["answer"]), EOS]
        ids = prompt + answer
        lab = [IGNORE] * len(prompt) + answer
        prompt_lengths.append(len(prompt))
        raw_lengths.append(len(ids))
        if max_length:
            ids, lab = ids[:max_length], lab[:max_length]
        rows.append(ids)
        labels.append(lab)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    label_t = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(zip(rows, labels, strict=True)):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        label_t[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(ids)] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": mask,
        "labels": label_t,
        "prompt_length": torch.tensor(prompt_lengths),
        "raw_length": torch.tensor(raw_lengths),
    }


# --- the model ------------------------------------------------------------------------------------


class CharGRU(nn.Module):
    """Embedding, a GRU, a linear head. Right padding keeps it honest: a left-to-right GRU never
    sees the pads after a real token, so the attention mask can be ignored."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.gru = nn.GRU(d_model, d_model, batch_first=True)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        del attention_mask  # see the class docstring
        hidden, _ = self.gru(self.embed(input_ids))
        return self.head(hidden)


def encode_replay(text: str) -> Example:
    """A replay input is a prompt such as `12+30=`; replayed before save and after reload."""
    a, _, b = text.rstrip("=").partition("+")
    return {
        "id": f"control:{text}",
        "sheet": "control",
        "prompt": f"{a}+{b}=",
        "answer": str(int(a) + int(b)),
    }


def make_task(n_sheets: int = 60, per_sheet: int = 4, seed: int = 0, d_model: int = 64) -> Task:
    """The factory the campaign names (`task.function`, default `make_task`); `task.options` are
    its keyword arguments."""
    return Task(
        name="example-addition",
        kind=CAUSAL_LM,
        examples=generate(n_sheets, per_sheet, seed),
        build_model=lambda: CharGRU(d_model),  # the runner seeds torch before calling it
        collate=collate,
        group_key="sheet",
        decode_token=decode_token,
        encode_replay=encode_replay,
        default_max_length=12,  # <bos> + "99+99=" + "198" + <eos> = 11 tokens at most
        ignore_index=IGNORE,
        pad_id=PAD,
    )
