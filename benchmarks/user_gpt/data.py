"""The user's data: short generated documents, cut into fixed windows of characters."""

from __future__ import annotations

import random

WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "he",
    "she",
    "it",
    "that",
    "his",
    "her",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "from",
    "they",
    "we",
    "you",
    "king",
    "queen",
    "lord",
    "lady",
    "night",
    "day",
    "sea",
    "ship",
    "house",
    "field",
    "river",
    "stone",
    "light",
    "dark",
    "fire",
    "wind",
    "rain",
    "said",
    "came",
    "went",
    "saw",
    "knew",
    "gave",
    "took",
    "made",
    "told",
    "asked",
    "heard",
    "thought",
    "spoke",
    "ran",
    "fell",
    "stood",
]
CHARS = sorted(set(" .,\n" + "".join(WORDS)))
VOCAB = len(CHARS)
STOI = {c: i for i, c in enumerate(CHARS)}


def documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(6, 12)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
            sentences.append(" ".join(words) + rng.choice((".", ",", ".\n")))
        docs.append(" ".join(sentences))
    return docs


def windows(n_docs: int, block: int, seed: int) -> list[dict]:
    """Every non-overlapping window of block + 1 characters, each with its document id."""
    out = []
    for d, text in enumerate(documents(n_docs, seed)):
        ids = [STOI[c] for c in text]
        for start in range(0, len(ids) - block - 1, block):
            out.append({"doc": f"doc{d:03d}", "ids": ids[start : start + block + 1]})
    return out
