"""What a captured trainer trains, read from its model and a row its collator makes: a causal LM, an
encoder-decoder (seq2seq), a sequence classifier (single-label, multi-label or regression) or a
token classifier. Every gate reads the kind from here, so each speaks that kind's terms: tokens
scored after the shift, targets, examples and their classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ....tasks.contract import CAUSAL_LM, CLASSIFICATION, TOKEN_CLASSIFICATION

SEQ2SEQ = "seq2seq"
SEQUENCE_CLASSIFICATION = "sequence_classification"
SINGLE_LABEL, MULTI_LABEL, REGRESSION = "single_label", "multi_label", "regression"


@dataclass(frozen=True)
class Kind:
    """What is trained, as the gates need it said."""

    name: str  # causal_lm | seq2seq | sequence_classification | token_classification
    problem: str = ""  # a sequence classifier's: single_label | multi_label | regression
    num_labels: int = 0
    class_names: tuple[str, ...] = ()

    @property
    def task_kind(self) -> str:
        """The kind of the adapter's task, as the shared checks (inspection, objective) read it."""
        if self.name == SEQUENCE_CLASSIFICATION:
            return CLASSIFICATION
        if self.name == TOKEN_CLASSIFICATION:
            return TOKEN_CLASSIFICATION
        return CAUSAL_LM  # an encoder-decoder is read through its causal view

    @property
    def classifier(self) -> bool:
        return self.name == SEQUENCE_CLASSIFICATION

    @property
    def shifted(self) -> bool:
        """Whether the loss scores the label at t from position t - 1 (a causal LM's)."""
        return self.name == CAUSAL_LM

    @property
    def unit(self) -> str:
        """What one scored target is, in a reason."""
        return {SEQUENCE_CLASSIFICATION: "examples", TOKEN_CLASSIFICATION: "labelled tokens"}.get(
            self.name, "scored tokens"
        )

    @property
    def label(self) -> str:
        words = {
            CAUSAL_LM: "causal LM",
            SEQ2SEQ: "encoder-decoder (seq2seq)",
            TOKEN_CLASSIFICATION: "token classifier",
        }
        if self.name in words:
            return words[self.name]
        problem = {MULTI_LABEL: "multi-label ", REGRESSION: "regression, "}.get(self.problem, "")
        return f"sequence classifier ({problem}{self.num_labels} labels)"

    def scored(self, labels: torch.Tensor) -> int:
        """Targets the loss scores in a batch's labels."""
        if self.name == SEQUENCE_CLASSIFICATION:
            return int(labels.shape[0])
        if self.shifted:
            return int((labels[..., 1:] != -100).sum())
        return int((labels != -100).sum())


def _names(config: Any, num_labels: int) -> tuple[str, ...]:
    id2label = getattr(config, "id2label", None) or {}
    return tuple(str(id2label.get(i, id2label.get(str(i), i))) for i in range(num_labels))


def kind_of(model: torch.nn.Module, row: dict[str, torch.Tensor] | None) -> Kind:
    """The kind of a captured model, with a row its collator made (the labels' shape and dtype)."""
    config = getattr(model, "config", None)
    if bool(getattr(config, "is_encoder_decoder", False)):
        return Kind(SEQ2SEQ)
    name = type(model).__name__
    problem = str(getattr(config, "problem_type", "") or "")
    num_labels = int(getattr(config, "num_labels", 0) or 0)
    if name.endswith("ForTokenClassification") or problem == "token_classification":
        return Kind(TOKEN_CLASSIFICATION, num_labels=num_labels, class_names=_names(config, num_labels))
    if name.endswith("ForSequenceClassification") or problem in (
        "single_label_classification",
        "multi_label_classification",
        "regression",
    ):
        labels = (row or {}).get("labels")
        if problem == "regression" or num_labels == 1:
            kind = REGRESSION
        elif problem == "multi_label_classification" or (
            labels is not None and labels.is_floating_point() and labels.dim() > 1
        ):
            kind = MULTI_LABEL
        else:
            kind = SINGLE_LABEL
        return Kind(SEQUENCE_CLASSIFICATION, kind, num_labels, _names(config, num_labels))
    return Kind(CAUSAL_LM)
