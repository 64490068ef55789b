"""Fine-tune a seq2seq model on prompt -> completion (broken twin of seq2seq.py): the targets are
padded to max_length by the tokenizer and the pad ids are never replaced with -100 (what the
summarization example's `ignore_pad_token_for_loss` does), so the loss learns padding.

    python seq2seq_padded_targets.py --model tiny/t5 --data tiny/prompt_completion.jsonl --output_dir out
"""

import argparse

from datasets import load_dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/s2s")
    p.add_argument("--max_source_length", type=int, default=32)
    p.add_argument("--max_target_length", type=int, default=16)
    p.add_argument("--grad_accum", type=int, default=1)
    a = p.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(a.model)
    raw = load_dataset("json", data_files=a.data, split="train")

    def preprocess(batch):
        inputs = tokenizer(batch["prompt"], max_length=a.max_source_length, truncation=True)
        targets = [c + tokenizer.eos_token for c in batch["completion"]]
        labels = tokenizer(
            text_target=targets, max_length=a.max_target_length, truncation=True, padding="max_length"
        )
        inputs["labels"] = labels["input_ids"]
        return inputs

    data = raw.map(preprocess, batched=True, remove_columns=raw.column_names)
    data = data.train_test_split(test_size=0.1, seed=0)
    args = Seq2SeqTrainingArguments(
        output_dir=a.output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=a.grad_accum,
        learning_rate=1e-3,
        num_train_epochs=1,
        logging_steps=10,
        save_strategy="epoch",
        report_to="none",
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["test"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
