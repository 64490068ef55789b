"""A Hugging Face `Trainer` / TRL `SFTTrainer` script piloted unchanged (docs/trainer.md).

`capture` runs the user's script up to its first `trainer.train()` and hands the built trainer
over; `settings` changes its arguments in place; `adapter` wraps it as the campaign's task;
`bodies` are the phase bodies that run on the trainer's own parts; `resume_worker` is the new
process of the resume check.
"""
