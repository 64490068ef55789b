"""A captured trainer seen as the campaign's task: its datasets as examples, its collator as the
collate, its tokenizer as the decoder, so the existing data checks read *their* batches.

Rows are collated one at a time through the trainer's own dataloader collator (the real one,
with the columns the trainer removes already removed), then stacked with right padding marked
in the attention mask: per-example figures stay per example even for padding-free collators
that flatten a batch into one row. The batches the loop really gets are shown apart
(`batches.py`).

An encoder-decoder model's row (`Seq2SeqTrainer`) is read through its causal view
(`seq2seq_view`): the checks written for one token sequence then read its encoder input as
context and its targets as the scored tokens. A preference trainer's row (TRL's `DPOTrainer`:
the chosen and rejected sequences, no labels, a `completion_mask`) is read by its first
sequence, scored where the completion mask is (`masked_view`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ....analysis.checks import Check, listing
from ....core.verdict import FAIL, PASS, WARN
from ....tasks.contract import CAUSAL_LM, Example, Task
from .estimate import trainer_source
from .kinds import Kind, kind_of
from .loop import encoder_decoder as is_encoder_decoder
from .loop import unwrapped

IGNORE = -100
TRAIN, EVAL = "train", "eval"
# Special tokens that end a turn, by name (besides the EOS): `<|end|>`, `<|im_end|>`, `<|eot_id|>`.
END_NAMES = re.compile(r"end|eot", re.IGNORECASE)


@dataclass
class Rows:
    """One of the trainer's datasets as its dataloader sees it: the rows and the collator."""

    dataset: Any
    collate_fn: Any

    def __len__(self) -> int:
        return len(self.dataset)

    def one(self, i: int) -> dict[str, torch.Tensor]:
        batch = self.collate_fn([self.dataset[int(i)]])
        return {k: v for k, v in dict(batch).items() if isinstance(v, torch.Tensor)}


def _train_rows(trainer: Any) -> Rows | None:
    if trainer.train_dataset is None:
        return None
    loader = trainer.get_train_dataloader()
    return Rows(loader.dataset, loader.collate_fn)


def eval_sets(trainer: Any) -> dict[str, tuple[str | None, Rows]]:
    """The trainer's eval datasets by split name: `eval` for one dataset; `eval_a`, `eval_b` for
    `eval_dataset = {"a": …, "b": …}` (the prefix `Trainer.evaluate` gives each one's metrics),
    each with its dict key and its rows as its own eval dataloader sees them."""
    ds = trainer.eval_dataset
    if ds is None:
        return {}
    if not isinstance(ds, dict):
        loader = trainer.get_eval_dataloader()
        return {EVAL: (None, Rows(loader.dataset, loader.collate_fn))}
    out: dict[str, tuple[str | None, Rows]] = {}
    for name in ds:
        loader = trainer.get_eval_dataloader(name)  # a name: the dict's dataset, its columns removed
        out[f"{EVAL}_{name}"] = (str(name), Rows(loader.dataset, loader.collate_fn))
    return out


def stack(rows: Sequence[Mapping[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """One-row batches right-padded into one: padding is mask 0 and label -100."""
    width = max(1, max(int(r["input_ids"].shape[-1]) for r in rows))
    n = len(rows)
    out = {
        "input_ids": torch.full((n, width), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((n, width), dtype=torch.long),
        "labels": torch.full((n, width), IGNORE, dtype=torch.long),
    }
    has_pos = all("position_ids" in r for r in rows)
    if has_pos:
        out["position_ids"] = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids = r["input_ids"].reshape(-1)
        length = ids.shape[0]
        out["input_ids"][i, :length] = ids
        mask = r.get("attention_mask")
        out["attention_mask"][i, :length] = 1 if mask is None else mask.reshape(-1)
        labels = r.get("labels")
        out["labels"][i, :length] = ids if labels is None else labels.reshape(-1)
        if has_pos:
            out["position_ids"][i, :length] = r["position_ids"].reshape(-1)
    return out


# A share of rows cut at the cap from which the run trains mostly on cut rows: a failure.
TRUNCATED_FAIL = 0.5


def _percentiles(lengths: list[int]) -> str:
    if not lengths:
        return "no rows"
    ordered = sorted(lengths)

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return f"lengths p50 {at(0.5)}, p95 {at(0.95)}, p99 {at(0.99)}, max {ordered[-1]}"


def stack_classes(
    rows: Sequence[Mapping[str, torch.Tensor]], pad_id: int, max_length: int = 0
) -> dict[str, torch.Tensor]:
    """One-row classifier batches right-padded into one: each row's inputs and its class (or
    its float targets, multi-label or regression)."""
    width = max(1, max(int(r["input_ids"].shape[-1]) for r in rows))
    n = len(rows)
    out = {
        "input_ids": torch.full((n, width), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((n, width), dtype=torch.long),
        "labels": torch.cat([r["labels"].reshape(1, -1) for r in rows]).squeeze(-1),
    }
    for i, r in enumerate(rows):
        ids = r["input_ids"].reshape(-1)
        out["input_ids"][i, : ids.shape[0]] = ids
        mask = r.get("attention_mask")
        out["attention_mask"][i, : ids.shape[0]] = 1 if mask is None else mask.reshape(-1)
    if max_length and width > max_length:
        out["input_ids"], out["attention_mask"] = (
            out["input_ids"][:, :max_length],
            out["attention_mask"][:, :max_length],
        )
    return out


def class_label_names(ds: Any) -> list[str] | None:
    """The names of a `datasets.ClassLabel` label column, None where the dataset has none."""
    features = getattr(ds, "features", None) or {}
    for column in ("label", "labels"):
        names = getattr(features.get(column), "names", None)
        if names:
            return [str(n) for n in names]
    return None


def scalar_fields(ds: Any, i: int) -> dict[str, Any]:
    """A raw row's short text and number columns (the label's name among them, where the script
    keeps one), for the classifier checks that compare names with the data."""
    if ds is None:
        return {}
    row = ds[int(i)]
    if not isinstance(row, Mapping):
        return {}
    return {
        f"field_{k}": v
        for k, v in row.items()
        if k not in ("input_ids", "attention_mask", "token_type_ids", "labels")
        and (isinstance(v, int | float) or (isinstance(v, str) and len(v) <= 200))
    }


def seq2seq_view(row: Mapping[str, torch.Tensor], start_id: int, pad_id: int) -> dict[str, torch.Tensor]:
    """A one-row encoder-decoder batch as one causal sequence: the encoder's tokens (context),
    the decoder start, then target j at its own position, scored where its label is. A causal
    check's "label at t is the token at t, predicted from t - 1" then holds: the decoder predicts
    target j from the start and targets < j. A target masked to -100 shows as `pad_id`; masked
    targets ending the row are padding (the collator's label padding)."""
    enc = row["input_ids"].reshape(-1)
    enc_mask = row.get("attention_mask")
    enc_mask = torch.ones_like(enc) if enc_mask is None else enc_mask.reshape(-1).long()
    labels = row["labels"].reshape(-1).long()
    masked = labels == IGNORE
    targets = torch.where(masked, torch.full_like(labels, pad_id), labels)
    # The trailing run of -100: a reversed cumulative product marks it.
    tail = masked.flip(0).long().cumprod(0).flip(0).bool()
    start = torch.tensor([start_id], dtype=torch.long)
    ignored = torch.full_like(enc, IGNORE)
    return {
        "input_ids": torch.cat([enc.long(), start, targets]).unsqueeze(0),
        "attention_mask": torch.cat([enc_mask, torch.ones(1, dtype=torch.long), (~tail).long()]).unsqueeze(0),
        "labels": torch.cat([ignored.long(), torch.tensor([IGNORE]), labels]).unsqueeze(0),
    }


def completion_labels(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A label-less batch's labels as its loss scores it: each input id where `completion_mask`
    (and the attention mask) say so, -100 elsewhere."""
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    scored = batch["completion_mask"].bool()
    if mask is not None:
        scored &= mask.bool()
    return ids.masked_fill(~scored, IGNORE)


def masked_view(row: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch without labels whose loss reads a `completion_mask` (TRL's preference trainers):
    its first sequence (the chosen one), labelled where the mask scores it. The loss of those
    trainers reads the completion tokens' log-probabilities through the same causal shift."""
    first = {k: v[:1] for k, v in row.items() if k in ("input_ids", "attention_mask", "completion_mask")}
    out = {"input_ids": first["input_ids"], "labels": completion_labels(first)}
    if "attention_mask" in first:
        out["attention_mask"] = first["attention_mask"]
    return out


def end_ids(tok: Any) -> set[int]:
    """The EOS and the special tokens named like an end of turn."""
    ids = {tok.eos_token_id} if getattr(tok, "eos_token_id", None) is not None else set()
    for text in getattr(tok, "all_special_tokens", []) or []:
        if END_NAMES.search(text) and text != getattr(tok, "pad_token", None):
            found = tok.convert_tokens_to_ids(text)
            if isinstance(found, int) and found >= 0:
                ids.add(found)
    return ids


@dataclass
class TrainerAdapter:
    """The captured trainer, its rows and the Task that exposes them to the data checks."""

    trainer: Any
    train: Rows
    # Split name (`eval`, or `eval_NAME` for each entry of a dict) -> (the dict key, the rows).
    eval_sets: dict[str, tuple[str | None, Rows]]
    tokenizer: Any
    pad_id: int
    ends: set[int] = field(default_factory=set)
    # An encoder-decoder model (`config.is_encoder_decoder`): its rows are read through
    # `seq2seq_view`, with the decoder's start token between input and targets.
    encoder_decoder: bool = False
    start_id: int = 0
    # What the trainer trains (kinds.py): a sequence classifier's rows are examples with a class,
    # shown to the classifier checks; a causal LM's and a seq2seq's, token sequences.
    kind: Kind = field(default_factory=lambda: Kind(CAUSAL_LM))
    task: Task = field(init=False)

    def __post_init__(self) -> None:
        examples: list[Example] = []
        raw = self.raw_sets() if self.kind.classifier else {}
        for split, rows in self.row_sets().items():
            examples += [
                {"id": f"{split}[{i}]", "group": f"{split}[{i}]", "split": split, "row": i}
                | scalar_fields(raw.get(split), i)
                for i in range(len(rows))
            ]
        self.examples = examples
        self._lengths: dict[tuple[str, int], int] = {}
        self.task = Task(
            name=f"trainer:{type(self.trainer).__name__}",
            kind=self.kind.task_kind,
            class_names=list(self.kind.class_names) or None,
            # What each row's class id means in its own dataset (a `ClassLabel`'s names): the
            # classifier checks hold it against the model's id2label, example by example.
            label_meaning=self.meaning if self.kind.classifier and self._meanings() else None,
            examples=examples,
            build_model=self._no_build,
            collate=self.collate,
            group_key="group",
            decode_token=self.decode,
            default_max_length=0,
            ignore_index=IGNORE,
            pad_id=self.pad_id,
            stop_ids=tuple(sorted(self.ends)),
            data_checks=self.checks,
        )

    @property
    def eval(self) -> Rows | None:
        """The first eval dataset's rows (None without one)."""
        return next((rows for _, rows in self.eval_sets.values()), None)

    def evals(self) -> dict[str, Rows]:
        return {split: rows for split, (_, rows) in self.eval_sets.items()}

    def row_sets(self) -> dict[str, Rows]:
        """Every dataset of the trainer by split name, train first."""
        return {TRAIN: self.train, **self.evals()}

    def eval_examples(self) -> int:
        return sum(len(rows) for rows in self.evals().values())

    @staticmethod
    def _no_build() -> torch.nn.Module:
        raise RuntimeError("a captured trainer's model is the script's own; the pilot never builds another")

    def rows_of(self, split: str) -> Rows:
        rows = self.row_sets().get(split)
        if rows is None:
            raise ValueError(f"the trainer has no {split} dataset")
        return rows

    def view(self, row: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One example's batch as the token checks read it: itself, an encoder-decoder's causal
        view, or a label-less preference batch's first sequence scored by its completion mask."""
        if self.kind.task_kind != CAUSAL_LM:
            return row  # a classifier's row: its inputs and its class (or its tokens' labels)
        if "labels" not in row and "completion_mask" in row:
            return masked_view(row)
        if not self.encoder_decoder or "labels" not in row:
            return row
        return seq2seq_view(row, self.start_id, self.pad_id)

    def one(self, example: Example) -> dict[str, torch.Tensor]:
        return self.view(self.rows_of(example["split"]).one(example["row"]))

    def collate(self, examples: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
        if self.kind.classifier:
            return stack_classes([self.one(ex) for ex in examples], self.pad_id, max_length)
        batch = stack([self.one(ex) for ex in examples], self.pad_id)
        if max_length and batch["input_ids"].shape[1] > max_length:
            batch = {k: v[:, :max_length] for k, v in batch.items()}
        return batch

    def decode(self, token: int) -> str:
        if self.tokenizer is None:
            return str(token)
        return self.tokenizer.decode(
            [int(token)], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def splits(self) -> dict[str, list[int]]:
        n = len(self.train)
        return {
            "train": list(range(n)),
            "validation": list(range(n, len(self.examples))),
            "test": [],
        }

    def length(self, split: str, i: int) -> int:
        key = (split, i)
        if key not in self._lengths:
            row = self.rows_of(split).dataset[int(i)]
            ids = row.get("input_ids") if isinstance(row, Mapping) else None
            if self.encoder_decoder:  # the causal view's length: input, start, targets
                ids = self.one({"split": split, "row": i})["input_ids"].reshape(-1)
            self._lengths[key] = (
                len(ids) if ids is not None else int(self.rows_of(split).one(i)["input_ids"].numel())
            )
        return self._lengths[key]

    def estimate_source(self) -> Any:
        """The fake-tensor estimate's model source (runner/memory/estimate reads it through here)."""
        return trainer_source(self, unwrapped(self.trainer))

    def longest(self) -> int:
        """The longest row the trainer's datasets hold (the campaign's max length)."""
        sets = self.row_sets()
        return max((self.length(s, i) for s, r in sets.items() for i in range(len(r))), default=0)

    def _meanings(self) -> dict[str, list[str]]:
        """Per split, its dataset's `ClassLabel` names (splits without one are left out)."""
        if not hasattr(self, "_names_by_split"):
            found = {s: class_label_names(ds) for s, ds in self.raw_sets().items()}
            self._names_by_split = {s: n for s, n in found.items() if n is not None}
        return self._names_by_split

    def meaning(self, example: Example) -> str:
        names = self._meanings().get(example["split"])
        if names is None:
            return ""
        row = self.raw_sets()[example["split"]][int(example["row"])]  # the same rows, every column
        value = row.get("label", row.get("labels")) if isinstance(row, Mapping) else None
        i = int(value) if isinstance(value, int | float) else -1
        return names[i] if 0 <= i < len(names) else ""

    def raw_sets(self) -> dict[str, Any]:
        """Each dataset as the script built it, every column kept (the label names among them)."""
        ds = self.trainer.eval_dataset
        evals = {EVAL: ds} if ds is not None and not isinstance(ds, dict) else {}
        if isinstance(ds, dict):
            evals = {f"{EVAL}_{name}": d for name, d in ds.items()}
        return {TRAIN: self.trainer.train_dataset, **evals}

    def checks(self) -> list[Check]:
        if self.kind.classifier:
            return [self.class_map_check()]
        if self.kind.task_kind != CAUSAL_LM:
            return []
        pairs = self.pair_check()
        return [
            self.end_check(),
            self.boundary_check(),
            self.truncation_check(),
            *([pairs] if pairs is not None else []),
        ]

    def length_cap(self) -> tuple[int, str]:
        """(the length the trainer cuts its rows at, where that was read), 0 when it names none:
        TRL's configs hold it (`max_length`). A script that cut its rows itself is not guessed at:
        a short dataset's longest rows pile up at its maximum as often as cut ones do."""
        declared = getattr(self.trainer.args, "max_length", None) or getattr(
            self.trainer.args, "max_seq_length", None
        )
        if isinstance(declared, int) and declared > 0:
            return declared, f"the trainer's max_length {declared}"
        return 0, ""

    def truncation_check(self) -> Check:
        """Rows the script cut at its max length, and replies that lost their end with it: the
        model never learns the tails, nor to stop there (TRL's default max_length 1024 cuts silently)."""
        n = len(self.train)
        lengths = [self.length(TRAIN, i) for i in range(n)]
        cap, how = self.length_cap()
        spread = _percentiles(lengths)
        if not cap:
            return Check(
                "truncation",
                PASS,
                f"the trainer names no max_length to cut rows at; as the script made them: {spread}",
            )
        # A packed row is filled to the length on purpose: its documents say nothing of a cut.
        at_cap = [i for i, length in enumerate(lengths) if length >= cap and not self._packed(i)]
        if not at_cap:
            return Check(
                "truncation", PASS, f"no train row reaches the cut at {cap} tokens ({how}; {spread})"
            )
        lost = self._lost_ends(at_cap) if self.ends else []
        share = len(at_cap) / n
        said = (
            f"{len(at_cap)} of {n} train rows ({share:.0%}) are cut at {cap} tokens ({how}; {spread})"
            + (f", {len(lost)} of them losing the end of their reply" if lost else "")
            + f" — e.g. {listing([f'train[{i}]' for i in at_cap], len(at_cap))}: the model never learns "
            "what was cut"
            + (", nor to stop there" if lost else "")
            + "; raise max_length or drop the longest rows"
        )
        verdict = FAIL if share >= TRUNCATED_FAIL else WARN
        return Check("truncation", verdict, said, len(at_cap), [f"train[{i}]" for i in at_cap[:10]])

    def _packed(self, i: int) -> bool:
        pos = self.train.one(i).get("position_ids")
        return pos is not None and bool((pos.reshape(-1)[1:] == 0).any())

    def _lost_ends(self, rows: list[int]) -> list[int]:
        """Of these train rows, those whose last scored token is no end token."""
        ends = torch.tensor(sorted(self.ends))
        lost = []
        for i in rows:
            b = self.view(self.train.one(i))
            labels, ids = b["labels"].reshape(-1), b["input_ids"].reshape(-1)
            scored = (labels != IGNORE).nonzero().flatten()
            if scored.numel() and not bool(torch.isin(ids[scored[-1]], ends)):
                lost.append(i)
        return lost

    def class_map_check(self) -> Check:
        """`config.id2label` against the label names each dataset still holds (a `ClassLabel`):
        a map built per split — where eval lacks a class — shifts every id after it."""
        model_names = list(self.kind.class_names)
        found: dict[str, list[str]] = {}
        for split, ds in self.raw_sets().items():
            names = class_label_names(ds)
            if names is not None:
                found[split] = names
        if not found:
            return Check(
                "class_map",
                PASS,
                f"the datasets hold class ids only: config.id2label {model_names} names them (checked "
                "against the ids' range and counts below)",
            )
        wrong = {s: names for s, names in found.items() if names != model_names}
        if wrong:
            split, names = next(iter(wrong.items()))
            first = next(
                (
                    i
                    for i in range(max(len(names), len(model_names)))
                    if names[i : i + 1] != model_names[i : i + 1]
                ),
                0,
            )
            said = ", ".join(f"{s}: {n}" for s, n in wrong.items())
            return Check(
                "class_map",
                FAIL,
                f"the {split} dataset's label names differ from the model's config.id2label {model_names} "
                f"({said}): class id {first} means {names[first] if first < len(names) else 'nothing'} in the "
                f"data and {model_names[first] if first < len(model_names) else 'nothing'} to the model — a "
                "class map built per split, or a model whose id2label was never set from the data",
                len(wrong),
                list(wrong),
            )
        return Check(
            "class_map",
            PASS,
            f"the label names of {', '.join(found)} equal the model's config.id2label {model_names}",
        )

    def pair_check(self) -> Check | None:
        """A preference pair whose rejected completion is its chosen one teaches nothing: the
        pair's DPO-style loss is log 2 whatever the weights (a column copied by mistake).
        None for rows that are not pairs (labels, or one sequence per example)."""
        if len(self.train) == 0:
            return None
        head = self.train.one(0)
        if "labels" in head or "completion_mask" not in head or head["input_ids"].shape[0] < 2:
            return None
        same: list[str] = []
        for i in range(len(self.train)):
            b = self.train.one(i)
            real = (
                b["attention_mask"].bool()
                if "attention_mask" in b
                else torch.ones_like(b["input_ids"]).bool()
            )
            scored = b["completion_mask"].bool() & real
            chosen, rejected = b["input_ids"][0][scored[0]], b["input_ids"][1][scored[1]]
            if torch.equal(chosen, rejected):
                same.append(f"train[{i}]")
        n = len(self.train)
        if same:
            return Check(
                "preference_pairs",
                FAIL,
                f"{len(same)} of {n} train pairs reject the very completion they choose: their loss has no "
                f"gradient (log 2 whatever the model) — e.g. {listing(same, len(same))}",
                len(same),
                same[:10],
            )
        return Check("preference_pairs", PASS, f"every one of {n} train pairs rejects another completion")

    def _train_batches(self, size: int = 64):
        idx = list(range(len(self.train)))
        for start in range(0, len(idx), size):
            chunk = idx[start : start + size]
            yield chunk, stack([self.view(self.train.one(i)) for i in chunk], self.pad_id)

    def end_check(self) -> Check:
        """A reply must teach the model to stop: an end token right after a scored span that is
        not scored itself (a collator masking every pad id when pad = EOS; a template leaving
        the end of turn outside the assistant mask) is a model that never learns to end."""
        if not self.ends:
            return Check(
                "end_supervised", PASS, "the tokenizer names no EOS or end-of-turn token: not checked"
            )
        bad: list[str] = []
        spans = 0
        ends = torch.tensor(sorted(self.ends))
        for chunk, b in self._train_batches():
            scored = b["labels"] != IGNORE
            scored[:, 0] = False  # the shift: position 0 is never a target
            real = b["attention_mask"].bool()
            # A position just after a scored one, itself not scored, holding an end token.
            after = torch.zeros_like(scored)
            after[:, 1:] = scored[:, :-1] & ~scored[:, 1:] & real[:, 1:]
            is_end = torch.isin(b["input_ids"], ends)
            spans += int(after.sum())
            hit = (after & is_end).any(1)
            bad += [f"train[{chunk[r]}]" for r in hit.nonzero().flatten().tolist()]
        n = len(self.train)
        names = ", ".join(repr(self.decode(t)) for t in sorted(self.ends))
        if bad:
            return Check(
                "end_supervised",
                FAIL,
                f"{len(bad)} of {n} train examples end a scored reply with an end token ({names}) that is "
                f"not scored itself: the model never learns to stop (a collator masking every pad id while "
                f"pad = EOS, or an end of turn outside the assistant mask) — e.g. {listing(bad, len(bad))}",
                len(bad),
                bad[:10],
            )
        return Check(
            "end_supervised", PASS, f"every scored reply that reaches an end token ({names}) scores it"
        )

    def boundary_check(self) -> Check:
        """In a packed or padding-free row a document's first token must not be predicted from
        the previous document's last one."""
        rows = 0
        bad: list[str] = []
        for chunk, b in self._train_batches():
            if "position_ids" not in b:
                return Check("document_boundaries", PASS, "no position_ids: one document per row")
            starts = (b["position_ids"] == 0) & b["attention_mask"].bool()
            starts[:, 0] = False
            rows += int(starts.any(1).sum())
            hit = (starts & (b["labels"] != IGNORE)).any(1)
            bad += [f"train[{chunk[r]}]" for r in hit.nonzero().flatten().tolist()]
        if bad:
            return Check(
                "document_boundaries",
                FAIL,
                f"{len(bad)} packed rows score a document's first token, predicted from the previous "
                f"document — e.g. {listing(bad, len(bad))}",
                len(bad),
                bad[:10],
            )
        return Check(
            "document_boundaries",
            PASS,
            f"{rows} of {len(self.train)} rows hold several documents; no first token of a document is scored",
        )


def adapt(trainer: Any) -> TrainerAdapter:
    evals = trainer.eval_dataset if isinstance(trainer.eval_dataset, dict) else {"": trainer.eval_dataset}
    named = [("train_dataset", trainer.train_dataset)]
    named += [(f"eval_dataset[{k!r}]" if k else "eval_dataset", ds) for k, ds in evals.items()]
    for name, ds in named:
        if ds is not None and not hasattr(ds, "__getitem__"):
            raise ValueError(
                f"its {name} is a {type(ds).__name__} without indexed rows (an IterableDataset?): "
                "the pilot needs rows it can index (a datasets.Dataset or a map-style torch Dataset)"
            )
    train = _train_rows(trainer)
    if train is None:
        raise ValueError("the trainer has no train_dataset")
    tok = getattr(trainer, "processing_class", None)
    tok = getattr(tok, "tokenizer", tok)  # a processor holds its tokenizer
    pad = getattr(tok, "pad_token_id", None)
    if pad is None:
        pad = getattr(tok, "eos_token_id", None) or 0
    model = unwrapped(trainer)
    start = getattr(getattr(model, "config", None), "decoder_start_token_id", None)
    kind = kind_of(model, train.one(0) if len(train) else None)
    return TrainerAdapter(
        trainer,
        train,
        eval_sets(trainer),
        tok,
        int(pad),
        end_ids(tok) if tok else set(),
        encoder_decoder=is_encoder_decoder(model),
        start_id=int(start if start is not None else pad),
        kind=kind,
    )
