"""How the exported model will be served, checked on the pilot's own model (R26): batched greedy
replies equal one-at-a-time ones, every reply stops at an end token within `max_new_tokens`, and
the config keeps no training-only setting. The comparisons are `objective_checks`'; this module
feeds them the task's replay prompts and forward."""

from __future__ import annotations

from typing import Any

import torch

from ...analysis import serving
from ...tasks.contract import CAUSAL_LM, Task
from ..checks import objective, objective_checks
from ..distributed import state as dist_state
from .replay import DEFAULT_NEW_TOKENS


def _prompt(task: Task, text: str, max_length: int) -> list[int]:
    assert task.encode_replay is not None
    batch = task.collate([task.encode_replay(text)], max_length)
    ids = batch["input_ids"][0]
    length = int(batch["attention_mask"][0].sum()) if "attention_mask" in batch else ids.numel()
    plen = int(batch["prompt_length"][0]) if "prompt_length" in batch else length
    return [int(t) for t in ids[: max(1, min(plen, length))]]


@torch.no_grad()
def generation(
    task: Task, model: torch.nn.Module, inputs: list[str], max_length: int, device: torch.device
) -> dict[str, Any]:
    """Greedy replies to the replay inputs one at a time and all in one left-padded batch (as a
    server batches requests, with the attention mask); which differ, which never stopped."""
    if task.kind != CAUSAL_LM or task.encode_replay is None or not inputs:
        return {"ran": False, "note": "no causal-LM replay inputs to generate from"}
    try:
        prompts = [_prompt(task, text, max_length) for text in inputs]
    except Exception as exc:  # a replay input the task cannot encode is reported by the replay
        return {"ran": False, "note": f"the replay inputs cannot be encoded: {exc}"}
    budget = max(1, task.max_new_tokens or DEFAULT_NEW_TOKENS)
    was_training = model.training
    model.eval()

    def step(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return objective.forward(task, model, {"input_ids": ids, "attention_mask": mask})

    try:
        single = [
            objective_checks.greedy_batched(step, [p], task.pad_id, budget, task.stop_ids, device)[0]
            for p in prompts
        ]
        batched = objective_checks.greedy_batched(step, prompts, task.pad_id, budget, task.stop_ids, device)
    except Exception as exc:
        return {"ran": False, "note": f"the forward cannot generate from padded batches: {exc}"}
    finally:
        model.train(was_training)
    cmp = objective_checks.compare_generations(single, batched, "greedy, left padding, attention mask")
    stops = objective_checks.unstopped(single, task.stop_ids) if task.stop_ids else []
    return {
        "ran": True,
        "max_new_tokens": budget,
        "stop_ids": list(task.stop_ids),
        **cmp.as_dict(),
        "unstopped": [inputs[i] for i in stops],
        "stop_checked": bool(task.stop_ids),
    }


def reply_ends(task: Task, indices: list[int], max_length: int, limit: int = 512) -> tuple[int, int]:
    """(training replies whose last supervised token is a stop id, replies): what the data teaches
    a reply to end with, measured on up to `limit` training examples as the loss sees them."""
    stops = {int(s) for s in task.stop_ids}
    ending = replies = 0
    chosen = list(indices)[:limit]
    for start in range(0, len(chosen), 64):
        batch = task.collate([task.examples[i] for i in chosen[start : start + 64]], max_length)
        labels = batch["labels"][:, 1:]  # the loss's targets: position t predicts t + 1
        for row in labels:
            scored = (row != task.ignore_index).nonzero().flatten()
            if scored.numel():
                replies += 1
                ending += int(int(row[scored[-1]]) in stops)
    return ending, replies


def generation_warnings(
    found: dict[str, Any], inputs: list[str], ends: tuple[int, int] | None = None
) -> list[str]:
    """What the served generation showed, each cause stated only where it was measured: `ends`
    is `reply_ends` (what the training replies end with)."""
    out = []
    if not found.get("ran"):
        return out
    if found["differing"]:
        i = found["differing"][0]
        out.append(
            f"batched greedy generation (left padding, attention mask) differs from one prompt at a time "
            f"for {len(found['differing'])} of {len(inputs)} replay inputs, e.g. {inputs[i]!r}: "
            f"{found['single'][i]} alone vs {found['batched'][i]} in a batch — the model does not read "
            "its positions or its mask from the attention mask, so served batches answer differently"
        )
    if found["unstopped"]:
        said = (
            f"{len(found['unstopped'])} of {len(inputs)} replies did not stop within max_new_tokens "
            f"{found['max_new_tokens']} at an end token (stop_ids {found['stop_ids']}), e.g. "
            f"{found['unstopped'][0]!r}"
        )
        ending, replies = ends if ends is not None else (0, 0)
        if replies and ending == replies:
            # Every training reply ends with a stop id: the pilot's briefly trained model has not
            # learnt it yet. No fault of the stop ids is measured: said in the row, not warned.
            found["note"] = (
                f"{said}: every one of {replies} training replies ends with a stop id, so the ids are "
                "the data's; a model trained for a pilot's few updates need not have learnt to stop"
            )
        elif replies:
            out.append(
                f"{said}: {replies - ending} of {replies} training replies end with another token than the "
                "stop ids, so the model is taught to end on something generation does not stop at"
            )
        else:
            out.append(f"{said}: the training data was not read for what its replies end with")
    return out


def config_warnings(task: Task, model: torch.nn.Module) -> list[str]:
    """The in-memory model's config as an export would save it: training-only `use_cache = false`,
    and stop ids missing from the EOS ids generation stops at (transformers models)."""
    inner = dist_state.unwrap(model)
    base = getattr(inner, "get_base_model", lambda: inner)()  # a PEFT wrapper: the base's config
    config = getattr(base, "config", None)
    if config is None:
        return []
    out = [w for w in [serving.training_only(getattr(config, "use_cache", None))] if w]
    gen = getattr(base, "generation_config", None)
    gen_dict = {"eos_token_id": getattr(gen, "eos_token_id", None)} if gen is not None else None
    eos, where = serving.served_eos(gen_dict, {"eos_token_id": getattr(config, "eos_token_id", None)})
    if task.stop_ids and eos:
        problem = serving.missing_end_tokens(task.stop_ids, eos, where, task.decode_token)
        if problem:
            out.append(problem)
    return out
