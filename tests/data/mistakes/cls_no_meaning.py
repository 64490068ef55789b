"""Sentiment of short reviews as bags of words. The user keeps the ids and a list of names, but
drops the text column holding the names once the ids are made: nothing ties id to name."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task

WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "film", "was", "plot"]
REVIEWS = [
    ("the film was great", "positive"),
    ("good plot", "positive"),
    ("fine film", "positive"),
    ("bad plot", "negative"),
    ("the film was awful", "negative"),
    ("poor film", "negative"),
]


def make_task(keep_name_field=True):
    data = []
    for k in range(36):
        text, sentiment = REVIEWS[k % len(REVIEWS)]
        row = {"id": f"r{k}", "reviewer": f"u{k // 3}", "text": text, "y": int(sentiment == "positive")}
        if keep_name_field:
            row["sentiment"] = sentiment
        data.append(row)

    def collate(batch, max_length):
        bags = torch.tensor([[float(w in r["text"].split()) for w in WORDS] for r in batch])
        return {"features": bags, "labels": torch.tensor([r["y"] for r in batch])}

    return Task(
        name="reviews",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="reviewer",
        build_model=lambda: nn.Linear(len(WORDS), 2),
        class_names=["negative", "positive"],
    )
