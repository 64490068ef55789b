"""plain_trainer.py's twin that never hands the Trainer its tokenizer nor saves it: `save_model`
writes the weights alone, and the exported folder cannot be served by itself.

Fine-tune a causal LM on prompt/completion pairs with a plain transformers Trainer.

The loss is our own (a Trainer subclass): cross-entropy summed over the completion tokens and
divided by the number of completion tokens in the whole accumulated batch, which the Trainer
passes as `num_items_in_batch`, so gradient accumulation weighs tokens, not microbatches.

    python plain_trainer.py --model tiny/model --data tiny/prompt_completion.jsonl --output_dir out
"""

import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments, set_seed

IGNORE_INDEX = -100


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/plain")
    p.add_argument("--max_length", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--eval_fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true")
    return p.parse_args()


def tokenize(example, tokenizer, max_length):
    prompt = tokenizer(example["prompt"], add_special_tokens=False)["input_ids"]
    completion = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
    input_ids = [tokenizer.bos_token_id, *prompt, *completion, tokenizer.eos_token_id][:max_length]
    # Only the completion (and its EOS) is learnt; the prompt is context.
    labels = [IGNORE_INDEX] * (1 + len(prompt)) + [*completion, tokenizer.eos_token_id]
    return {"input_ids": input_ids, "labels": labels[:max_length]}


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
        # num_items_in_batch: the scored tokens of the whole accumulation window (None in evaluation).
        if num_items_in_batch is None:
            num_items_in_batch = (targets != IGNORE_INDEX).sum()
        loss = loss / num_items_in_batch
        return (loss, outputs) if return_outputs else loss


def main():
    args = parse_args()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)

    raw = load_dataset("json", data_files=args.data, split="train")
    splits = raw.train_test_split(test_size=args.eval_fraction, seed=args.seed)
    columns = raw.column_names
    train = splits["train"].map(
        tokenize, fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_length}, remove_columns=columns
    )
    evaluation = splits["test"].map(
        tokenize, fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_length}, remove_columns=columns
    )

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        weight_decay=0.01,
        logging_steps=5,
        save_strategy="epoch",
        eval_strategy="epoch",
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
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
