"""A user's transformers Trainer script without `datasets` (the GPU image has none): prompt/completion
JSON lines read with `json`, tokenised into a plain torch Dataset, our own loss over the
completion tokens divided by the accumulated batch's count (`num_items_in_batch`).

    python trainer_script.py --model tiny/model --data tiny/prompt_completion.jsonl --output_dir out [--bf16]

scripts/gpu_check.py pilots it on the GPU (`pilot-tui init --trainer`, then a headless run).
"""

import argparse
import json
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments, set_seed

IGNORE_INDEX = -100


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/trainer")
    p.add_argument("--max_length", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max_steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true")
    return p.parse_args()


class Examples(Dataset):
    """Tokenised rows: input ids with the prompt's labels masked."""

    def __init__(self, rows, tokenizer, max_length):
        self.rows = []
        for row in rows:
            prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
            completion = tokenizer(row["completion"], add_special_tokens=False)["input_ids"]
            ids = [tokenizer.bos_token_id, *prompt, *completion, tokenizer.eos_token_id][:max_length]
            labels = [IGNORE_INDEX] * (1 + len(prompt)) + [*completion, tokenizer.eos_token_id]
            self.rows.append({"input_ids": ids, "labels": labels[:max_length]})

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


@dataclass
class PadCollator:
    pad_token_id: int

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        batch = {"input_ids": [], "attention_mask": [], "labels": []}
        for f in features:
            gap = longest - len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [self.pad_token_id] * gap)
            batch["attention_mask"].append([1] * len(f["input_ids"]) + [0] * gap)
            batch["labels"].append(f["labels"] + [IGNORE_INDEX] * gap)
        return {k: torch.tensor(v) for k, v in batch.items()}


class CompletionTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1, :].float()
        targets = labels[:, 1:].to(logits.device)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        if num_items_in_batch is None:
            num_items_in_batch = (targets != IGNORE_INDEX).sum()
        loss = loss / num_items_in_batch
        return (loss, outputs) if return_outputs else loss


def main():
    args = parse_args()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    with open(args.data, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    random.Random(args.seed).shuffle(rows)
    cut = int(len(rows) * 0.9)
    train = Examples(rows[:cut], tokenizer, args.max_length)
    evaluation = Examples(rows[cut:], tokenizer, args.max_length)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        weight_decay=0.01,
        logging_steps=5,
        save_strategy="steps",
        save_steps=args.max_steps,
        eval_strategy="steps",
        eval_steps=args.max_steps,
        bf16=args.bf16,
        seed=args.seed,
        report_to="none",
    )
    trainer = CompletionTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=PadCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
