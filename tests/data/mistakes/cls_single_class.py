"""Spam or not from three counts. The collate reads the label from `is_spam` — a column the
export fills only for flagged mail, so every label collapses to 0 — instead of `spam`."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(wrong_column=False):
    data = []
    for k in range(40):
        spam = k % 2
        data.append(
            {
                "id": f"m{k}",
                "sender": f"s{k // 4}",
                "links": 5 * spam + k % 3,
                "caps": 3 * spam,
                "length": 40 - 20 * spam,
                "spam": spam,
                "is_spam": 0,
                "folder": ["ham", "spam"][spam],
            }
        )
    column = "is_spam" if wrong_column else "spam"

    def collate(batch, max_length):
        x = torch.tensor([[r["links"], r["caps"], r["length"] / 10] for r in batch], dtype=torch.float32)
        return {"features": x, "labels": torch.tensor([r[column] for r in batch])}

    return Task(
        name="spam",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="sender",
        build_model=lambda: nn.Linear(3, 2),
        class_names=["ham", "spam"],
    )
