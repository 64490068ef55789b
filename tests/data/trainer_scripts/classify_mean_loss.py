"""classify.py's broken twin: its own loss averages each microbatch and ignores num_items_in_batch,
and it trains with gradient accumulation (4), so every update is 4 microbatch means added up.

    python classify_mean_loss.py --model tiny/classifier --data tiny/classes.jsonl --output_dir out
"""

import argparse

import numpy as np
import torch.nn.functional as F
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
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--grad_accum", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


class MeanLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits, labels)  # this microbatch's mean, whatever the window
        return (loss, outputs) if return_outputs else loss


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
    trainer = MeanLossTrainer(
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
