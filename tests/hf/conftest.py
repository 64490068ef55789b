"""Tiny Hugging Face models and data, built once per session in a temp folder (see build.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the [hf] extra is not installed: pip install -e '.[test,hf]'")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import build


@dataclass(frozen=True)
class HFModels:
    """Paths of the built models and data files."""

    root: Path
    chat: Path
    sentiment: Path
    tied_plain: Path  # tied embeddings, template without generation markers, pad = eos
    untied_marked: Path  # untied, template with {% generation %}, no pad token
    unlocatable: Path  # template that rewrites assistant replies
    eos_only: Path  # eos_token_id is </s> alone: generation would not stop at <|end|>
    classifier: Path
    classifier_shuffled: Path  # id2label names swapped: the ids no longer mean their names


@pytest.fixture(scope="session")
def hf(tmp_path_factory) -> HFModels:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("hf")
    chat_rows = build.chat_rows()
    chat = build.write_jsonl(root / "chat.jsonl", chat_rows)
    sentiment = build.write_jsonl(root / "sentiment.jsonl", build.sentiment_rows())
    texts = build.chat_texts(chat_rows)
    sent_texts = [r["text"] for r in build.sentiment_rows()]
    return HFModels(
        root=root,
        chat=chat,
        sentiment=sentiment,
        tied_plain=build.causal_lm(
            root / "tied-plain", texts, tied=True, template=build.PLAIN_TEMPLATE, pad="</s>"
        ),
        untied_marked=build.causal_lm(
            root / "untied-marked", texts, tied=False, template=build.MARKED_TEMPLATE, pad=None
        ),
        unlocatable=build.causal_lm(
            root / "unlocatable", texts, tied=True, template=build.UNLOCATABLE_TEMPLATE, pad=None
        ),
        eos_only=build.causal_lm(
            root / "eos-only",
            texts,
            tied=True,
            template=build.PLAIN_TEMPLATE,
            pad="</s>",
            stop_at_end_of_turn=False,
        ),
        classifier=build.classifier(root / "classifier", sent_texts, {0: "negative", 1: "positive"}),
        classifier_shuffled=build.classifier(root / "shuffled", sent_texts, {0: "positive", 1: "negative"}),
    )


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """In-process runs use one thread, as the runner does beside a busy view: OpenMP threads spin
    while they wait, and on a shared 2-core machine they slow each other down many times over."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
