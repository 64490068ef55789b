"""Supervised fine-tuning on chat data with TRL's SFTTrainer, learning the assistant replies only.

BROKEN TWIN of sft_chat.py: the script sets its own chat template, one without
`{% generation %}` markers, yet asks for `assistant_only_loss=True`: no token can be told to be
the assistant's. (TRL 1.16 refuses it while building the trainer: the script fails before
`train()`.) Everything else is identical.

    python sft_chat_no_markers.py --model_name_or_path tiny/model --dataset tiny/chat.jsonl --output_dir out
"""

import argparse

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

# Our house chat format.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--model_name_or_path", required=True)
parser.add_argument("--dataset", required=True, help="a JSONL file of {'messages': [...]} rows")
parser.add_argument("--output_dir", default="sft-chat")
parser.add_argument("--learning_rate", type=float, default=2e-3)
parser.add_argument("--per_device_train_batch_size", type=int, default=4)
parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
parser.add_argument("--num_train_epochs", type=float, default=1)
parser.add_argument("--max_steps", type=int, default=-1)
parser.add_argument("--max_length", type=int, default=96)
parser.add_argument("--gradient_checkpointing", action="store_true")
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--seed", type=int, default=0)


def main():
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype="auto")

    dataset = load_dataset("json", data_files=args.dataset, split="train")
    dataset = dataset.train_test_split(test_size=0.1, seed=args.seed)

    config = SFTConfig(
        output_dir=args.output_dir,
        assistant_only_loss=True,
        max_length=args.max_length,
        learning_rate=args.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=1,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        num_train_epochs=args.num_train_epochs,
        max_steps=args.max_steps,
        gradient_checkpointing=args.gradient_checkpointing,
        bf16=args.bf16,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=50,
        save_steps=100,
        save_total_limit=2,
        seed=args.seed,
        report_to="none",
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"],
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
