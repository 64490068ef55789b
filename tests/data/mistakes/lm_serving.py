"""Reverse a word, with a model of the user's own that has position embeddings. Two serving
mistakes, each an option:

- `positions = "absolute"`: position ids are `arange(length)` whatever the padding, so a prompt
  left-padded in a batch sees other positions than alone (batched replies differ);
  `"mask"` counts positions from the attention mask, as served batches need;
- `stop = "eos"`: the task names `<eos>` as its stop token while the model ends a reply with
  `<eot>`, so replies never stop within `max_new_tokens`; `"eot"` names the right one.

The head carries a length prior towards `<eot>`, so even this untrained model ends its reply
after a few tokens, as a trained one would.
"""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS, EOT = 0, 1, 2, 3, 4
VOCAB = 5 + len(ALPHABET)


def tokens(text):
    return [5 + ALPHABET.index(c) for c in text]


class PositionLM(nn.Module):
    def __init__(self, positions):
        super().__init__()
        self.positions = positions
        self.embed = nn.Embedding(VOCAB, 16)
        self.pos = nn.Embedding(64, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        if self.positions == "mask":
            pos = (mask.cumsum(1) - 1).clamp(min=0)
        else:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        h = (self.embed(input_ids) + self.pos(pos)) * mask[..., None]
        context = h.cumsum(1) / mask.cumsum(1).clamp(min=1)[..., None]  # causal mean of real tokens
        prior = torch.zeros(VOCAB, device=input_ids.device)
        prior[EOT] = 0.15
        return 4 * self.out(torch.tanh(context)) + pos[..., None].float() * prior


def make_task(positions="mask", stop="eot"):
    rng = random.Random(5)
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 6))) for _ in range(40)]

    def collate(batch, max_length):
        seqs, prompts = [], []
        for ex in batch:
            prompt = [BOS, *tokens(ex["word"]), SEP]
            reply = [] if ex.get("control") else [*tokens(ex["word"][::-1]), EOT]
            seqs.append([*prompt, *reply][: max_length or None])
            prompts.append(len(prompt))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        labels = torch.full((len(seqs), width), -100)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s)
            mask[r, : len(s)] = 1
            labels[r, prompts[r] : len(s)] = ids[r, prompts[r] : len(s)]
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": labels,
            "prompt_length": torch.tensor(prompts),
        }

    names = {PAD: "_", BOS: "^", SEP: "|", EOS: "<eos>", EOT: "<eot>"}
    return Task(
        name="reverse-served",
        kind=CAUSAL_LM,
        examples=[{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)],
        build_model=lambda: PositionLM(positions),
        collate=collate,
        group_key="doc",
        decode_token=lambda t: names.get(t) or ALPHABET[t - 5],
        encode_replay=lambda text: {
            "id": f"control:{text}",
            "doc": "control",
            "word": text,
            "control": True,
        },
        stop_ids=(EOT,) if stop == "eot" else (EOS,),
        max_new_tokens=12,
        default_max_length=16,
    )
