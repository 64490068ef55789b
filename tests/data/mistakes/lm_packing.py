"""Reverse a word with a small transformers Llama, two words packed per row by a hand-rolled
collator (fewer pad tokens, as packing promises). `isolate = false`: the pack's attention mask is
all ones and its positions run on, so the second word's reply attends to the first word — a
document that sees another (row 14 of the failures table). `isolate = true`: positions restart at
each word and no 2-D mask is passed, which transformers reads as packed sequences (a
block-diagonal mask, as flash-attention's varlen path does)."""

import random

import torch

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS = 0, 1, 2, 3
VOCAB = 4 + len(ALPHABET)


def tokens(text):
    return [4 + ALPHABET.index(c) for c in text]


def make_task(isolate=True):
    from transformers import LlamaConfig, LlamaForCausalLM

    rng = random.Random(7)
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(3, 6))) for _ in range(32)]

    def build():
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=PAD,
            attn_implementation="sdpa",
        )
        return LlamaForCausalLM(config)

    def one(word):
        seq = [BOS, *tokens(word), SEP, *tokens(word[::-1]), EOS]
        start = seq.index(SEP) + 1
        labels = [-100] * start + seq[start:]
        return seq, labels

    def collate(batch, max_length):
        rows = []
        for k in range(0, len(batch), 2):  # two words a row
            ids, labels, pos = [], [], []
            for ex in batch[k : k + 2]:
                seq, lab = one(ex["word"])
                pos += list(range(len(seq))) if isolate else list(range(len(ids), len(ids) + len(seq)))
                ids += seq
                labels += lab
            rows.append((ids, labels, pos))
        width = max(len(r[0]) for r in rows)
        out_ids = torch.full((len(rows), width), PAD)
        out_labels = torch.full((len(rows), width), -100)
        out_pos = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (ids, lab, pos) in enumerate(rows):
            out_ids[r, : len(ids)] = torch.tensor(ids)
            out_labels[r, : len(lab)] = torch.tensor(lab)
            out_pos[r, : len(pos)] = torch.tensor(pos)
            mask[r, : len(ids)] = 1
        batch = {"input_ids": out_ids, "labels": out_labels, "position_ids": out_pos}
        if not isolate:
            batch["attention_mask"] = mask
        return batch

    def forward(model, batch):
        return model(
            input_ids=batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            position_ids=batch["position_ids"],
            use_cache=False,
        ).logits

    return Task(
        name="reverse-llama-packed",
        kind=CAUSAL_LM,
        examples=[{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)],
        build_model=build,
        collate=collate,
        group_key="doc",
        forward=forward,
        stop_ids=(EOS,),
        default_max_length=32,
    )
