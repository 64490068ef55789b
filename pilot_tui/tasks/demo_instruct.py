"""Built-in demo: tiny instruction tuning on generated string operations, char-level.

Each conversation works on one random word and has 1-3 turns (`rev:`, `up:`, `sort:`), so turns
of a conversation are near-duplicates: only a split by conversation keeps validation honest (R4).
Prompt tokens are masked from the loss; the response and the end token are supervised.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

import torch

from .contract import CAUSAL_LM, Example, Task
from .tiny_gpt import TinyGPT, set_checkpointing

PAD, BOS, SEP, EOS = 0, 1, 2, 3
_SPECIAL = {PAD: "<pad>", BOS: "<bos>", SEP: "<sep>", EOS: "<eos>"}
_OFFSET = 4  # printable ASCII 32..126 follow the specials
VOCAB = _OFFSET + 95
IGNORE = -100

OPS = {
    "rev": lambda w: w[::-1],
    "up": str.upper,
    "sort": lambda w: "".join(sorted(w)),
}


def encode_text(text: str) -> list[int]:
    return [_OFFSET + ord(c) - 32 for c in text if 32 <= ord(c) <= 126]


def decode_token(token: int) -> str:
    if token in _SPECIAL:
        return _SPECIAL[token]
    if _OFFSET <= token < VOCAB:
        return chr(token - _OFFSET + 32)
    return f"<{token}>"


def _unique(word: str, seen: set[str], max_len: int) -> str:
    """A word no earlier conversation used, changed without drawing from the RNG (so the rest of
    the generated data is the same with or without this)."""
    letters = "abcdefgh"
    n = 0
    while word in seen:
        # Short words collide most: lengthen them; a word at full length rewrites its last letters.
        if len(word) < max_len:
            word += letters[n % 8]
        else:
            k = min(3, len(word))
            word = word[:-k] + "".join(letters[(n >> (3 * i)) % 8] for i in range(k))
        n += 1
    seen.add(word)
    return word


def generate(
    n_conversations: int,
    seed: int,
    min_len: int = 2,
    max_len: int = 10,
    unique_words: bool = True,
    split_field: str = "",
    periods: int = 0,
) -> list[dict[str, Any]]:
    """Deterministic examples: same seed, same list.

    `unique_words` keeps two conversations from sharing a word, so no identical example can sit
    in two splits. `split_field = "conversation"` adds a ready `split` field assigned per
    conversation; `"turn"` assigns it per example, a leaking split the split check must catch.
    `periods > 0` adds a `period` field (conversations in order, `periods` periods in all).
    """
    rng = random.Random(seed)
    examples = []
    seen: set[str] = set()
    for c in range(n_conversations):
        word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(min_len, max_len)))
        if unique_words:
            word = _unique(word, seen, max_len)
        for t, op in enumerate(rng.sample(sorted(OPS), rng.randint(1, 3))):
            ex = {
                "id": f"c{c:04d}-t{t}",
                "conversation": f"c{c:04d}",
                "prompt": f"{op}:{word}",
                "response": OPS[op](word),
            }
            if split_field:
                ex["split"] = _ready_split(ex["conversation"] if split_field == "conversation" else ex["id"])
            if periods > 0:
                ex["period"] = f"p{c * periods // n_conversations:03d}"
            examples.append(ex)
    return examples


def _ready_split(unit: str) -> str:
    """A fixed 80/10/10 assignment by a hash of `unit`, the way a vendor's ready splits look."""
    bucket = int(hashlib.sha256(unit.encode()).hexdigest(), 16) % 10
    return "validation" if bucket == 8 else "test" if bucket == 9 else "train"


def make_collate(mask_prompt: bool = True, mask_all: bool = False, label_padding: bool = False):
    """Build the collate; the flags exist so broken campaigns can show what the checks catch
    (`label_padding`: padding gets the pad id as its label instead of the ignore index)."""

    def collate(examples: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
        rows, labels, prompt_lens, raw_lens = [], [], [], []
        for ex in examples:
            prompt = [BOS, *encode_text(ex["prompt"]), SEP]
            response = [*encode_text(ex["response"]), EOS]
            ids = prompt + response
            lab = ([IGNORE] * len(prompt) if mask_prompt else prompt[:]) + response
            if mask_all:
                lab = [IGNORE] * len(ids)
            raw_lens.append(len(ids))
            prompt_lens.append(len(prompt))
            if max_length:
                ids, lab = ids[:max_length], lab[:max_length]
            rows.append(ids)
            labels.append(lab)
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        label_t = torch.full((len(rows), width), PAD if label_padding else IGNORE, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (ids, lab) in enumerate(zip(rows, labels, strict=True)):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            label_t[i, : len(lab)] = torch.tensor(lab)
            mask[i, : len(ids)] = 1
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": label_t,
            "prompt_length": torch.tensor(prompt_lens),
            "raw_length": torch.tensor(raw_lens),
        }

    return collate


def encode_replay(text: str) -> Example:
    op, _, word = text.partition(":")
    response = OPS[op](word) if op in OPS else ""
    return {"id": f"control:{text}", "conversation": "control", "prompt": text, "response": response}


# What `make_task` accepts (checked by the loader before it runs): a demo bounded by what a laptop
# generates in seconds, a model by what the positions and the demo's CPU runs hold.
OPTION_BOUNDS = {
    "n_conversations": (1, 200_000),
    "d_model": (4, 4096),
    "n_layers": (1, 64),
    "n_heads": (1, 64),
    "max_word": (2, 60),  # 2 x max_word + 8 positions of the 128 the model has
    "periods": (0, 10_000),
    "mask_all_from": (-1, 200_000),
}


def make_task(
    n_conversations: int = 240,
    seed: int = 0,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    mask_prompt: bool = True,
    mask_all_from: int = -1,
    max_word: int = 10,
    unique_words: bool = True,
    split_field: str = "",
    periods: int = 0,
    label_padding: bool = False,
) -> Task:
    """The demo instruction-tuning task. `mask_prompt=False` and `mask_all_from` exist for the
    broken demo campaigns: they reproduce real template bugs the inspection must catch;
    `split_field` and `periods` give ready splits and time periods to the split check."""
    if split_field not in ("", "conversation", "turn"):
        raise ValueError(f"split_field must be '', 'conversation' or 'turn', got {split_field!r}")
    examples = generate(
        n_conversations,
        seed,
        max_len=max_word,
        unique_words=unique_words,
        split_field=split_field,
        periods=periods,
    )
    base = make_collate(mask_prompt=mask_prompt, label_padding=label_padding)
    masked = make_collate(mask_prompt=mask_prompt, mask_all=True, label_padding=label_padding)

    def collate(batch: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
        if mask_all_from < 0:
            return base(batch, max_length)
        # A template bug that masks every label of the examples from index `mask_all_from` on.
        parts = [(masked if int(ex["id"][1:5]) >= mask_all_from else base)([ex], max_length) for ex in batch]
        return _stack(parts)

    return Task(
        name="demo-instruct",
        kind=CAUSAL_LM,
        examples=examples,
        build_model=lambda: TinyGPT(VOCAB, d_model=d_model, n_layers=n_layers, n_heads=n_heads),
        collate=collate,
        group_key="conversation",
        decode_token=decode_token,
        encode_replay=encode_replay,
        set_activation_checkpointing=set_checkpointing,
        default_max_length=2 * max_word + 8,
        ignore_index=IGNORE,
        pad_id=PAD,
    )


def _stack(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    width = max(p["input_ids"].shape[1] for p in parts)
    fill = {"input_ids": PAD, "attention_mask": 0, "labels": IGNORE}
    out: dict[str, torch.Tensor] = {}
    for key in parts[0]:
        tensors = [p[key] for p in parts]
        if tensors[0].dim() == 2:
            tensors = [torch.nn.functional.pad(t, (0, width - t.shape[1]), value=fill[key]) for t in tensors]
        out[key] = torch.cat(tensors)
    return out
