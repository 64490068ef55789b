"""Continue a count (`3 4 5` -> `6 7`). The collate pads with 0 and gives an attention mask of
ones everywhere ("the model is causal, right padding is harmless"), and labels copy the padded
ids, so the pads are targets."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

VOCAB = 32  # 0 = pad, 1 = bos, 2 = eos, 3.. = numbers
PAD, BOS, EOS = 0, 1, 2


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 12)
        self.out = nn.Linear(12, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.embed(input_ids))


def make_task(label_pads=False):
    data = []
    for start in range(16):
        for length in (2, 3, 5):
            data.append({"id": f"c{start}-{length}", "start": start, "length": length, "series": f"s{start}"})

    def collate(batch, max_length):
        rows = []
        for ex in batch:
            numbers = [3 + ex["start"] + k for k in range(ex["length"] + 2)]
            rows.append(([BOS, *numbers, EOS])[: max_length or None])
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), PAD)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
        labels = ids.clone()
        labels[:, :3] = -100  # the first two numbers are the prompt
        if not label_pads:
            labels[ids == PAD] = -100
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    return Task(
        name="count",
        kind=CAUSAL_LM,
        examples=data,
        build_model=TinyLM,
        collate=collate,
        group_key="series",
        pad_id=PAD,
        default_max_length=16,
    )
