"""Answer a word with its letters sorted, in a small chat format. The user's template writes
`<s>` at the start of each conversation and their tokenizer adds one too (`bos_twice`): every
example starts `<s><s>` while the served prompt starts `<s>` once. A word may still start with
a doubled letter (`aab…`): content, not a BOS."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, USER, BOT, EOT = 0, 1, 2, 3, 4
VOCAB = 5 + len(ALPHABET)


def tokens(text):
    return [5 + ALPHABET.index(c) for c in text]


def render(word):
    """The chat template: it writes the BOS itself."""
    return [BOS, USER, *tokens(word), BOT]


def make_task(bos_twice=False):
    rng = random.Random(4)
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(3, 6))) for _ in range(40)]
    words[:3] = ["aabc", "bbad", "ccde"]  # doubled first letters: not a BOS

    def tokenize(word):
        ids = render(word)
        return [BOS, *ids] if bos_twice else ids  # add_special_tokens=True on a rendered template

    def collate(batch, max_length):
        seqs = []
        prompts = []
        for ex in batch:
            prompt = tokenize(ex["word"])
            seqs.append([*prompt, *tokens("".join(sorted(ex["word"]))), EOT][: max_length or None])
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

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.out = nn.Linear(16, VOCAB)

        def forward(self, input_ids, attention_mask=None):
            return self.out(self.embed(input_ids))

    names = {PAD: "_", BOS: "<s>", USER: "<u>", BOT: "<a>", EOT: "<e>"}
    return Task(
        name="sort-chat",
        kind=CAUSAL_LM,
        examples=[{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)],
        build_model=TinyLM,
        collate=collate,
        group_key="doc",
        decode_token=lambda t: names.get(t) or ALPHABET[t - 5],
        default_max_length=16,
        stop_ids=(EOT,),
    )
