"""Prompt/completion SFT with packing, in the style of TRL's own `trl/scripts/sft.py`.

Several examples share one row of `max_length` tokens (best-fit packing, padding-free: document
boundaries are where `position_ids` restart); only the completions are learnt, TRL's default for
prompt/completion data. The model is given by name and loaded by SFTTrainer itself.

    python sft_packing.py --model_name_or_path tiny/model --dataset_path tiny/prompt_completion.jsonl \
        --output_dir out --max_length 64 --per_device_train_batch_size 2 --bf16 false
"""

from dataclasses import dataclass, field

from datasets import load_dataset
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser


@dataclass
class ScriptArguments:
    dataset_path: str = field(metadata={"help": "JSONL file with 'prompt' and 'completion' fields"})
    eval_fraction: float = field(default=0.1, metadata={"help": "held out for evaluation"})


def main(script_args, training_args, model_args):
    training_args.packing = True
    training_args.model_init_kwargs = {"dtype": model_args.dtype or "auto"}

    dataset = load_dataset("json", data_files=script_args.dataset_path, split="train")
    dataset = dataset.train_test_split(test_size=script_args.eval_fraction, seed=training_args.seed)

    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"] if training_args.eval_strategy != "no" else None,
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
