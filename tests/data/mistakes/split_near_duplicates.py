"""Topic of support tickets, tokenised by words. The export holds the same ticket twice when it
was re-filed: a new date and source (`duplicates = "refiled"`), and sometimes re-labelled by
another agent (`duplicates = "relabelled"`)."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task

TOPICS = ["billing", "login", "shipping"]
VOCAB = [
    "charge",
    "twice",
    "refund",
    "password",
    "reset",
    "locked",
    "parcel",
    "late",
    "lost",
    "my",
    "is",
    "was",
]
TEMPLATES = [
    ["my", "charge", "twice"],
    ["refund", "my", "charge"],
    ["password", "reset"],
    ["my", "password", "locked"],
    ["parcel", "late"],
    ["my", "parcel", "lost"],
    ["parcel", "was", "lost"],
    ["charge", "was", "twice"],
]
TOPIC_OF = [0, 0, 1, 1, 2, 2, 2, 0]


def make_task(duplicates=""):
    data = []
    for k in range(48):
        words = TEMPLATES[k % len(TEMPLATES)] + [VOCAB[(k // len(TEMPLATES)) % len(VOCAB)]] * (1 + k // 8)
        data.append(
            {
                "id": f"t{k}",
                "customer": f"c{k}",
                "date": f"2024-03-{1 + k % 28:02d}",
                "source": "mail",
                "words": words,
                "topic": TOPIC_OF[k % len(TEMPLATES)],
            }
        )
    if duplicates:
        for k in range(0, 48, 3):
            copy = dict(data[k], id=f"t{k}-refiled", customer=f"c{k}-again", date="2024-04-30", source="web")
            if duplicates == "relabelled":
                copy["topic"] = (copy["topic"] + 1) % 3
            data.append(copy)

    def collate(batch, max_length):
        ids = [[VOCAB.index(w) + 1 for w in r["words"]][: max_length or None] for r in batch]
        width = max(map(len, ids))
        x = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros_like(x)
        for i, row in enumerate(ids):
            x[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return {"input_ids": x, "attention_mask": mask, "labels": torch.tensor([r["topic"] for r in batch])}

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.EmbeddingBag(len(VOCAB) + 1, 8)
            self.out = nn.Linear(8, 3)

        def forward(self, batch):
            return self.out(self.embed(batch["input_ids"], per_sample_weights=None))

    return Task(
        name="tickets",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="customer",
        build_model=Bag,
        forward=lambda model, batch: model(batch),
        class_names=TOPICS,
    )
