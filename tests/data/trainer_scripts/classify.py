"""Fine-tune a sequence classifier with a plain transformers Trainer, the way the examples do.

The model's own head and loss (`AutoModelForSequenceClassification`), labels as a `ClassLabel`
whose names are the config's `id2label`, `DataCollatorWithPadding`, accuracy as the metric.

    python classify.py --model tiny/classifier --data tiny/classes.jsonl --output_dir out
"""

import argparse

import numpy as np
from datasets import ClassLabel, load_dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/classify")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--grad_accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def accuracy(prediction):
    logits, labels = prediction
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def main():
    args = parse_args()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model)
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]

    raw = load_dataset("json", data_files=args.data, split="train")
    raw = raw.cast_column("label", ClassLabel(names=names))
    splits = raw.train_test_split(test_size=0.2, seed=args.seed, stratify_by_column="label")

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=64)

    train = splits["train"].map(tokenize, batched=True)
    evaluation = splits["test"].map(tokenize, batched=True)

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        logging_steps=10,
        eval_strategy="epoch",
        save_strategy="epoch",
        seed=args.seed,
        report_to="none",
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=accuracy,
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
