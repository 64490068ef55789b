"""Reverse a word with a small transformers Llama whose attention is the user's own kernel,
registered with transformers' AttentionInterface the way a fused or hand-written kernel is. The
`wrong` kernel forgets the causal mask (every position sees the tokens it must predict): the loss
still falls, the model learns to copy. The `right` one is PyTorch's SDPA under the same name."""

import random

import torch

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS = 0, 1, 2, 3
VOCAB = 4 + len(ALPHABET)
NAME = "user_attention"


def tokens(text):
    return [4 + ALPHABET.index(c) for c in text]


def register(kernel):
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def wrong(module, query, key, value, attention_mask, **kwargs):
        # The bug: no mask at all (and so no causality); the rest as SDPA computes it.
        kwargs["is_causal"] = False
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)

    AttentionInterface.register(NAME, wrong if kernel == "wrong" else sdpa_attention_forward)


def make_task(kernel="right"):
    from transformers import LlamaConfig, LlamaForCausalLM

    register(kernel)
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
            max_position_embeddings=32,
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=PAD,
            attn_implementation=NAME,
        )
        return LlamaForCausalLM(config)

    def collate(batch, max_length):
        seqs = [[BOS, *tokens(ex["word"]), SEP, *tokens(ex["word"][::-1]), EOS] for ex in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        labels = torch.full((len(seqs), width), -100)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s)
            mask[r, : len(s)] = 1
            start = s.index(SEP) + 1
            labels[r, start : len(s)] = ids[r, start : len(s)]
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return Task(
        name="reverse-llama-own-attention",
        kind=CAUSAL_LM,
        examples=[{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)],
        build_model=build,
        collate=collate,
        group_key="doc",
        forward=lambda model, batch: (
            model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
        ),
        stop_ids=(EOS,),
        default_max_length=16,
    )
