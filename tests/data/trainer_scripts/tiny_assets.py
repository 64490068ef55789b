"""Tiny local stand-ins for what a training script downloads: a 2-layer Llama-style causal LM, a
BPE tokenizer trained here on the data (with a chat template), and JSONL data in three formats.
Nothing comes from a hub; a build takes a few seconds on CPU.

    python tiny_assets.py OUT            # writes OUT/model, OUT/{chat,prompt_completion,text}.jsonl

`build(out)` does the same from Python and returns the paths; it is idempotent (an existing,
complete build of the same size is reused), so a test session and a script run can share one folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

# Each reply and its end-of-turn token inside {% generation %}: TRL's assistant_only_loss builds its
# mask from these markers.
MARKED_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|end|>{% endgeneration %}\n"
    "{% else %}{{ m['content'] }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

OPS = {"rev": lambda w: w[::-1], "up": str.upper, "sort": lambda w: "".join(sorted(w))}
LETTERS = "abcdefgh"
# A build is complete when this file exists (written last): an interrupted build is redone.
DONE = ".complete"


@dataclass(frozen=True)
class Assets:
    root: Path
    model: Path  # chat template with generation markers, pad token <pad>
    chat: Path  # {"messages": [...]} rows
    prompt_completion: Path  # {"prompt", "completion"} rows
    text: Path  # {"text"} rows


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 6)))


def chat_rows(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """String operations as chats; every fourth has a system turn, some have two exchanges."""
    rng = random.Random(seed)
    rows = []
    for c in range(n):
        word = _word(rng)
        messages: list[dict[str, str]] = []
        if c % 4 == 0:
            messages.append({"role": "system", "content": "answer briefly"})
        for op in rng.sample(sorted(OPS), rng.randint(1, 2)):
            messages += [
                {"role": "user", "content": f"{op}: {word}"},
                {"role": "assistant", "content": OPS[op](word)},
            ]
        rows.append({"messages": messages})
    return rows


def prompt_completion_rows(n: int = 96, seed: int = 1) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        word, op = _word(rng), rng.choice(sorted(OPS))
        rows.append({"prompt": f"{op}: {word} =", "completion": f" {OPS[op](word)}"})
    return rows


def text_rows(n: int = 96, seed: int = 2) -> list[dict[str, str]]:
    """Short lines of 'op word = result' sentences, of varied length (padding matters)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 3)):
            word, op = _word(rng), rng.choice(sorted(OPS))
            parts.append(f"{op} {word} is {OPS[op](word)}.")
        rows.append({"text": " ".join(parts)})
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _corpus(chat, pc, text) -> list[str]:
    return (
        [m["content"] for r in chat for m in r["messages"]]
        + [r["prompt"] + r["completion"] for r in pc]
        + [r["text"] for r in text]
    )


def _tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=SPECIALS[4:],
    )
    fast.chat_template = MARKED_TEMPLATE
    return fast


def _model(tok, hidden: int, layers: int):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # Generation stops at the end of the sequence or at the end of a chat turn.
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|end|>")],
        pad_token_id=tok.pad_token_id,
    )
    return model


def paths(out: Path) -> Assets:
    out = Path(out)
    return Assets(
        root=out,
        model=out / "model",
        chat=out / "chat.jsonl",
        prompt_completion=out / "prompt_completion.jsonl",
        text=out / "text.jsonl",
    )


def build(out: Path, *, hidden: int = 32, layers: int = 2) -> Assets:
    """Write the model folders and data under `out` (reused when already complete)."""
    found = paths(out)
    stamp = f"hidden={hidden} layers={layers}\n"
    done = found.root / DONE
    if done.exists() and done.read_text() == stamp:
        return found
    done.unlink(missing_ok=True)
    found.root.mkdir(parents=True, exist_ok=True)
    chat, pc, text = chat_rows(), prompt_completion_rows(), text_rows()
    _write_jsonl(found.chat, chat)
    _write_jsonl(found.prompt_completion, pc)
    _write_jsonl(found.text, text)
    tok = _tokenizer(_corpus(chat, pc, text))
    model = _model(tok, hidden, layers)
    # Written beside and renamed: a reader never sees half a model folder.
    tmp = found.model.with_name(f".{found.model.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(found.model, ignore_errors=True)
    os.replace(tmp, found.model)
    done.write_text(stamp)
    return found


def build_seq2seq(assets: Assets) -> Path:
    """A 2-layer T5 (d_model 32) beside `assets.model`, on its tokenizer: `Seq2SeqTrainer` scripts
    train it. Built on first use only (the causal scripts never need it)."""
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    folder = assets.root / "t5"
    if (folder / "config.json").is_file():
        return folder
    tok = AutoTokenizer.from_pretrained(assets.model)
    config = T5Config(
        vocab_size=len(tok),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    tmp = folder.with_name(f".{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    T5ForConditionalGeneration(config).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, folder)
    return folder


def classification_rows(n: int = 120, seed: int = 3) -> list[dict[str, str]]:
    """`{"text": "rev abc", "label": "rev"}`: which operation a word is shown with (3 classes)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        op = sorted(OPS)[i % len(OPS)]
        word = _word(rng)
        rows.append({"text": f"{op}: {word} = {OPS[op](word)}", "label": op})
    return rows


def build_classifier(assets: Assets) -> tuple[Path, Path]:
    """A sequence classifier beside `assets.model` (the causal model's body, a new 3-class head;
    `id2label` in the config) and its labelled JSONL: what `AutoModelForSequenceClassification`
    scripts fine-tune. Built on first use only."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder, data = assets.root / "classifier", assets.root / "classes.jsonl"
    if (folder / "config.json").is_file() and data.is_file():
        return folder, data
    _write_jsonl(data, classification_rows())
    names = sorted(OPS)
    tok = AutoTokenizer.from_pretrained(assets.model)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        assets.model,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
        pad_token_id=tok.pad_token_id,
    )
    tmp = folder.with_name(f".{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, folder)
    return folder, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args(argv)
    found = build(args.out, hidden=args.hidden, layers=args.layers)
    for name, value in vars(found).items():
        print(f"{name:18} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
