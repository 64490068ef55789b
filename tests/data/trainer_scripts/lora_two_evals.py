"""LoRA fine-tuning with peft on prompt/completion pairs, a plain transformers Trainer, and two
held-out eval sets passed as a dict: `Trainer.evaluate` reports each under its own prefix
(`eval_rev_loss`, `eval_other_loss`), and `metric_for_best_model` names the one that matters.

    python lora_two_evals.py --model tiny/model --data tiny/prompt_completion.jsonl --output_dir out
"""

import argparse

import torch
from datasets import load_dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments, set_seed

IGNORE_INDEX = -100


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/lora")
    p.add_argument("--max_length", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--lora_r", type=int, default=8)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def tokenize(example, tokenizer, max_length):
    prompt = tokenizer(example["prompt"], add_special_tokens=False)["input_ids"]
    completion = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
    input_ids = [tokenizer.bos_token_id, *prompt, *completion, tokenizer.eos_token_id][:max_length]
    labels = [IGNORE_INDEX] * (1 + len(prompt)) + [*completion, tokenizer.eos_token_id]
    return {"input_ids": input_ids, "labels": labels[:max_length]}


def collate(features, pad_token_id):
    longest = max(len(f["input_ids"]) for f in features)
    batch = {"input_ids": [], "attention_mask": [], "labels": []}
    for f in features:
        gap = longest - len(f["input_ids"])
        batch["input_ids"].append(f["input_ids"] + [pad_token_id] * gap)
        batch["attention_mask"].append([1] * len(f["input_ids"]) + [0] * gap)
        batch["labels"].append(f["labels"] + [IGNORE_INDEX] * gap)
    return {k: torch.tensor(v) for k, v in batch.items()}


def main():
    args = parse_args()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(model, lora)
    model.print_trainable_parameters()

    raw = load_dataset("json", data_files=args.data, split="train")
    splits = raw.train_test_split(test_size=0.2, seed=args.seed)
    held_out = splits["test"]
    # Two eval sets: the reversals, and every other operation.
    evals = {
        "other": held_out.filter(lambda r: not r["prompt"].startswith("rev")),
        "rev": held_out.filter(lambda r: r["prompt"].startswith("rev")),
    }
    kw = {
        "fn_kwargs": {"tokenizer": tokenizer, "max_length": args.max_length},
        "remove_columns": raw.column_names,
    }
    train = splits["train"].map(tokenize, **kw)
    evals = {name: ds.map(tokenize, **kw) for name, ds in evals.items()}

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        logging_steps=5,
        eval_strategy="epoch",
        save_strategy="no",
        metric_for_best_model="rev_loss",
        seed=args.seed,
        report_to="none",
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evals,
        data_collator=lambda features: collate(features, tokenizer.pad_token_id),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
