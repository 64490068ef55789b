"""The task contract: what a campaign's task must provide to be piloted.

A user task is a plain Python file with a function (default `make_task(**options)`) that returns
a `Task`. See the README and `campaigns/example_task.py` for a complete, runnable example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Example = Mapping[str, Any]
Batch = dict[str, "torch.Tensor"]

CAUSAL_LM = "causal_lm"
CLASSIFICATION = "classification"
KINDS = (CAUSAL_LM, CLASSIFICATION)
# A captured trainer's token classifier (labels per token, no shift): its rows are shown to the
# checks, which say what they do not treat yet; a task file declares one of KINDS.
TOKEN_CLASSIFICATION = "token_classification"


@dataclass(frozen=True)
class Task:
    """Everything the runner needs to pilot a task; only the first six fields are required.

    - `examples`: every example, each a mapping holding the group key field (`group_key`).
    - `build_model()`: a fresh model; the runner seeds torch before calling it.
    - `collate(examples, max_length)`: the batch exactly as the model gets it. Causal LM:
      `input_ids`, `attention_mask`, `labels` (aligned with `input_ids`, `ignore_index` where a
      token does not count; the loss shifts by one). Optionally `prompt_length` and `raw_length`
      per row (untruncated counts) so the inspection can tell prompt supervision and cut
      responses. Classification: `features` (any tensor) and `labels` (class ids).
    - `decode_token(id)`: a readable piece for one token id (causal LM).
    - `class_names`: id -> name (classification).
    - `forward(model, batch)`: logits; default `model(input_ids, attention_mask)` for causal LM and
      `model(features)` for classification.
    - `loss(logits, batch)`: (sum of per-target losses, number of supervised targets); the runner
      divides by the supervised count of the whole update (R9). Default: cross-entropy.
    - `encode_replay(text)`: turns one `[replay]` input into an example (R16); a task file
      written before it was renamed may still pass it as `encode_control`.
    - `label_meaning(example)`: what the example's label *means* by construction (e.g. the
      generator's class name), so a shuffled class mapping is caught (R2).
    - `set_activation_checkpointing(model, on)`: switch for the checkpointing variant (R11).
    - `stop_ids`: token ids that end a generated reply (EOS, end of turn): the replay
      stops there, up to `max_new_tokens` (R16).
    - `data_checks()`: the task's own dataset checks (`checks.Check`), added to `inspect`'s.
    - `notes`: what the task chose for the user (e.g. which pad token), shown in the load row.
    - `stack_check(device, precision)`: a task-specific stack probe for `stack` (R18), a dict
      with `name`, `ok`, `error`.
    - `export_state(model)` / `load_export(model, tensors)`: what `export` saves and how the
      final reload applies it (e.g. a LoRA adapter alone); default: the whole state dict.
    """

    name: str
    kind: str
    examples: Sequence[Example]
    build_model: Callable[[], torch.nn.Module]
    collate: Callable[[Sequence[Example], int], Batch]
    group_key: str = "group"
    decode_token: Callable[[int], str] | None = None
    class_names: Sequence[str] | None = None
    forward: Callable[[torch.nn.Module, Batch], torch.Tensor] | None = None
    loss: Callable[[torch.Tensor, Batch], tuple[torch.Tensor, torch.Tensor]] | None = None
    encode_replay: Callable[[str], Example] | None = None
    label_meaning: Callable[[Example], str] | None = None
    set_activation_checkpointing: Callable[[torch.nn.Module, bool], None] | None = None
    default_max_length: int = 0
    ignore_index: int = -100
    pad_id: int = 0
    time_key: str = ""
    stop_ids: tuple[int, ...] = ()
    max_new_tokens: int = 0
    data_checks: Callable[[], Sequence[Any]] | None = None
    notes: tuple[str, ...] = ()
    stack_check: Callable[[Any, str], dict[str, Any]] | None = None
    export_state: Callable[[torch.nn.Module], Mapping[str, torch.Tensor]] | None = None
    load_export: Callable[[torch.nn.Module, Mapping[str, torch.Tensor]], None] | None = None
    # The old name of `encode_replay` (task files written before the rename still load).
    encode_control: Callable[[str], Example] | None = None

    def __post_init__(self) -> None:
        if self.encode_replay is None and self.encode_control is not None:
            object.__setattr__(self, "encode_replay", self.encode_control)
