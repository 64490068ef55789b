"""Preference-tune a causal LM with TRL's DPOTrainer (broken twin of dpo.py): the mapping that
renames the columns copies `chosen` into `rejected`, so every pair prefers a reply to itself and
the DPO loss has no gradient to follow.

    python dpo_same_pair.py --model tiny/model --data tiny/preference.jsonl --output_dir out
"""

import argparse

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output_dir", default="out/dpo")
    p.add_argument("--beta", type=float, default=0.1)
    a = p.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model)
    raw = load_dataset("json", data_files=a.data, split="train")
    pairs = raw.map(
        lambda ex: {"prompt": ex["question"], "chosen": ex["good"], "rejected": ex["good"]},
        remove_columns=raw.column_names,
    )
    data = pairs.train_test_split(test_size=0.1, seed=0)
    args = DPOConfig(
        output_dir=a.output_dir,
        per_device_train_batch_size=4,
        learning_rate=1e-4,
        beta=a.beta,
        num_train_epochs=1,
        bf16=False,
        report_to="none",
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["test"],
        processing_class=tokenizer,
    )
    trainer.train()


if __name__ == "__main__":
    main()
