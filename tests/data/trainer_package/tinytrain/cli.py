"""`tinytrain train CONFIG.json`: fine-tune a causal LM on prompt/completion rows, every setting
(the learning rate and the seed included) read from the config file, none from the command line —
the way `llamafactory-cli train config.yaml` is used. Also `python -m tinytrain.cli train CONFIG`.
"""

import json
import sys

from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Trainer,
    TrainingArguments,
    set_seed,
)


def tokenize(example, tokenizer):
    prompt = tokenizer(example["prompt"], add_special_tokens=False)["input_ids"]
    completion = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
    ids = [tokenizer.bos_token_id, *prompt, *completion, tokenizer.eos_token_id]
    labels = [-100] * (1 + len(prompt)) + [*completion, tokenizer.eos_token_id]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}


def train(config: dict) -> None:
    set_seed(config.get("seed", 42))
    tokenizer = AutoTokenizer.from_pretrained(config["model"])
    model = AutoModelForCausalLM.from_pretrained(config["model"])
    raw = load_dataset("json", data_files=config["data"], split="train")
    splits = raw.train_test_split(test_size=0.1, seed=config.get("seed", 42))
    train_set = splits["train"].map(
        tokenize, fn_kwargs={"tokenizer": tokenizer}, remove_columns=raw.column_names
    )
    eval_set = splits["test"].map(
        tokenize, fn_kwargs={"tokenizer": tokenizer}, remove_columns=raw.column_names
    )
    args = TrainingArguments(
        output_dir=config["output_dir"],
        learning_rate=config["learning_rate"],
        per_device_train_batch_size=config.get("per_device_train_batch_size", 4),
        max_steps=config.get("max_steps", -1),
        seed=config.get("seed", 42),
        eval_strategy="steps",
        eval_steps=10,
        report_to="none",
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model(config["output_dir"])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "train":
        print("usage: tinytrain train CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        train(json.load(handle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
