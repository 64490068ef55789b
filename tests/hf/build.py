"""Tiny Hugging Face models built on the spot: a BPE tokenizer trained with `tokenizers` on the
test data, 2-layer Llama-style causal LMs (tied and untied embeddings) and a sequence classifier.
Nothing comes from a hub. Seconds on CPU; built once per test session."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SPECIALS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

# Renders each turn as `<|role|>\ncontent<|end|>\n`; no generation markers: the task must render
# turn by turn and align offsets.
PLAIN_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Same rendering, with the assistant reply and its end token marked for the assistant mask.
MARKED_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|end|>{% endgeneration %}\n"
    "{% else %}{{ m['content'] }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# A template that rewrites the reply: its assistant turns cannot be located in the tokens.
UNLOCATABLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['role'] == 'assistant' %}>> {{ m['content'] | upper }}{% else %}{{ m['content'] }}{% endif %}"
    "<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

OPS = {"rev": lambda w: w[::-1], "up": str.upper, "sort": lambda w: "".join(sorted(w))}
SENTIMENT = {"good": "positive", "great": "positive", "bad": "negative", "awful": "negative"}


def chat_rows(n: int = 48, seed: int = 0) -> list[dict[str, Any]]:
    """String operations as chats; some conversations have two exchanges (multi-turn)."""
    rng = random.Random(seed)
    rows = []
    for c in range(n):
        word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        ops = rng.sample(sorted(OPS), rng.randint(1, 2))
        messages = []
        if c % 4 == 0:
            messages.append({"role": "system", "content": "answer briefly"})
        for op in ops:
            messages += [
                {"role": "user", "content": f"{op}: {word}"},
                {"role": "assistant", "content": OPS[op](word)},
            ]
        rows.append({"conversation_id": f"c{c // 2:03d}", "messages": messages})
    return rows


def sentiment_rows(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    # Distinct texts: a review repeated under another source would be the same input in two
    # splits (the split check's `same_input` flags it), which this fixture is not about.
    texts = rng.sample([(w, a + b) for w in sorted(SENTIMENT) for a in "abcdefgh" for b in "abcdefgh"], n)
    return [
        {"text": f"the film was {word} {tail}", "label": SENTIMENT[word], "source": f"s{i // 2}"}
        for i, (word, tail) in enumerate(texts)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train_tokenizer(texts: list[str], template: str, pad: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[3:],
    )
    if pad:
        fast.pad_token = pad
    fast.chat_template = template
    return fast


def causal_lm(
    folder: Path,
    texts: list[str],
    *,
    tied: bool,
    template: str,
    pad: str | None,
    hidden: int = 32,
    stop_at_end_of_turn: bool = True,
) -> Path:
    """`stop_at_end_of_turn`: `eos_token_id` lists `<|end|>`, which closes each turn in the
    templates, beside `</s>`; without it the served model would talk past its turn."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_tokenizer(texts, template, pad)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
        bos_token_id=tok.bos_token_id,
        eos_token_id=(
            [tok.eos_token_id, tok.convert_tokens_to_ids("<|end|>")]
            if stop_at_end_of_turn
            else tok.eos_token_id
        ),
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def classifier(folder: Path, texts: list[str], id2label: dict[int, str]) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = train_tokenizer(texts, PLAIN_TEMPLATE, pad=None)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def chat_texts(rows: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for r in rows for m in r["messages"]] + ["answer briefly"]
