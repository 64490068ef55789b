"""A Hugging Face `Trainer` / TRL `SFTTrainer` script piloted unchanged (docs/trainer.md).

`capture` runs the user's script up to its first `trainer.train()` and hands the built trainer
over; `settings` changes its arguments in place; `adapter` shows its rows to the data checks and
`batches` the ones its loop really gets; `loop` and `probe` drive its own `train()`;
`registry` holds the phase bodies, which live in `data_gates`, `engine_gates`, `resume_gate`
(with `resume_worker`, the new process) and `board`; `replay` is what export keeps and
`final` compares (with `reload_worker`, its new process); `fresh_variant` runs a variant with other
`args` / `env` in a fresh capture (`variant_worker`, its new process); `estimate` is its fake-tensor
model source; `campaign` opens such a campaign.
"""
