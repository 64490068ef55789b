"""Causal language modelling on a text file, in the style of transformers' `examples/pytorch/
language-modeling/run_clm.py`: three argument dataclasses parsed by HfArgumentParser, texts
tokenised and concatenated into blocks of `block_size`, and training only under `--do_train`
(evaluation only under `--do_eval`), as the HF examples do.

    python hf_argparser.py --model_name_or_path tiny/model --train_file tiny/text.jsonl \
        --output_dir out --do_train --block_size 32
"""

import logging
import math
import sys
from dataclasses import dataclass, field
from itertools import chain

import transformers
from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Path to a pretrained model or its hub name"})
    dtype: str | None = field(default=None, metadata={"help": "auto, bfloat16, float16 or float32"})


@dataclass
class DataTrainingArguments:
    train_file: str = field(metadata={"help": "A JSON lines file with a 'text' field"})
    validation_split_percentage: int = field(default=10, metadata={"help": "% of the train file held out"})
    block_size: int = field(default=64, metadata={"help": "Length of the training blocks"})
    max_train_samples: int | None = field(default=None)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=sys.argv[1])
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    logger.info(f"Training/evaluation parameters {training_args}")
    set_seed(training_args.seed)

    raw = load_dataset("json", data_files={"train": data_args.train_file})
    pct = data_args.validation_split_percentage
    raw["validation"] = load_dataset("json", data_files=data_args.train_file, split=f"train[:{pct}%]")
    raw["train"] = load_dataset("json", data_files=data_args.train_file, split=f"train[{pct}%:]")

    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, dtype=model_args.dtype)

    def tokenize_function(examples):
        return tokenizer([t + tokenizer.eos_token for t in examples["text"]])

    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized = raw.map(
            tokenize_function, batched=True, remove_columns=["text"], desc="Running tokenizer"
        )

    block_size = data_args.block_size

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = (len(concatenated["input_ids"]) // block_size) * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="grouping texts together"):
        lm_datasets = tokenized.map(
            group_texts, batched=True, desc=f"Grouping texts in chunks of {block_size}"
        )

    train_dataset = lm_datasets["train"]
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset.select(range(min(len(train_dataset), data_args.max_train_samples)))
    eval_dataset = lm_datasets["validation"]

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )

    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        metrics = trainer.evaluate()
        try:
            metrics["perplexity"] = math.exp(metrics["eval_loss"])
        except OverflowError:
            metrics["perplexity"] = float("inf")
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
