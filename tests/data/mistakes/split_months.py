"""Forecast a store's daily sales from the previous week; the campaign splits by month, so
validation and test come after train. The export writes months as `2024-5` (`padded = False`),
or, in another export, as season names (`seasons = True`)."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task

SEASONS = ["spring", "summer", "autumn", "winter"]


def make_task(padded=True, seasons=False):
    data = []
    for k in range(120):
        year, month = 2023 + k // 60, 1 + (k // 5) % 12
        period = SEASONS[month % 4] if seasons else (f"{year}-{month:02d}" if padded else f"{year}-{month}")
        sales = [((k * 7 + d) % 11) / 10 + k / 1000 for d in range(7)]
        data.append(
            {
                "id": f"d{k}",
                "month": period,
                "sales": sales,
                "up": int(sales[-1] > sales[0]),
                "trend": "up" if sales[-1] > sales[0] else "down",
            }
        )

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["sales"] for r in batch]),
            "labels": torch.tensor([r["up"] for r in batch]),
        }

    return Task(
        name="sales",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="month",
        build_model=lambda: nn.Linear(7, 2),
        class_names=["down", "up"],
    )
