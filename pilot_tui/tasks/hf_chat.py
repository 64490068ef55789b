"""Token ids and labels from a tokenizer: chat templates, prompt/completion, plain text.

What is supervised, exactly (the `hf_causal_lm` contract): every token of an assistant turn's
content and the end-of-turn token that closes it — the model must learn to stop — and nothing
else under `train_on = "assistant"`. Assistant spans come from the template's own assistant mask
when it marks generation (`{% generation %}`), otherwise from rendering the conversation turn by
turn and aligning the tokens' character offsets. When a turn cannot be located the example gets
no label at all and a reason: the `inspect` gate fails on it, never a silent guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

IGNORE = -100
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


class LocateError(Exception):
    """The assistant turns of one conversation cannot be located in its tokens."""


@dataclass
class Encoded:
    """One example as token ids, labels aligned with them, and where the prompt ends."""

    ids: list[int]
    labels: list[int]
    prompt_length: int
    end_tokens: set[int] = field(default_factory=set)
    problem: str = ""


def template_of(tok: Any) -> str:
    template = getattr(tok, "chat_template", None)
    if isinstance(template, Mapping):  # named templates: the default one renders chats
        template = template.get("default") or next(iter(template.values()), None)
    return template or ""


def has_generation_markers(tok: Any) -> bool:
    return bool(_GENERATION.search(template_of(tok)))


def special_ids(tok: Any) -> set[int]:
    ids = set(getattr(tok, "all_special_ids", []) or [])
    decoder = getattr(tok, "added_tokens_decoder", {}) or {}
    ids |= {i for i, t in decoder.items() if getattr(t, "special", False)}
    return ids


def _as_list(out: Any) -> list[int]:
    ids = out["input_ids"] if isinstance(out, Mapping) or hasattr(out, "keys") else out
    return [int(i) for i in ids]


def _spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _close(
    tok: Any, ids: Sequence[int], spans: list[tuple[int, int]], specials: set[int]
) -> tuple[list[list[int]], set[int]]:
    """Each turn's supervised positions: its content span and the special token that ends it
    (whitespace the template puts between the two is skipped, not supervised)."""
    out, ends = [], set()
    for k, (a, b) in enumerate(spans):
        positions = list(range(a, b))
        if ids[b - 1] in specials:
            ends.add(ids[b - 1])
            out.append(positions)
            continue
        j = b
        while j < len(ids) and ids[j] not in specials and not tok.decode([ids[j]]).strip():
            j += 1
        if j >= len(ids) or ids[j] not in specials:
            raise LocateError(f"assistant turn {k + 1} is not closed by an end-of-turn token")
        ends.add(ids[j])
        out.append([*positions, j])
    return out, ends


def _marked_spans(tok: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[tuple[int, int]]]:
    out = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids = _as_list(out)
    spans = _spans(list(out["assistant_masks"]))
    wanted = sum(1 for m in messages if m["role"] == "assistant")
    if len(spans) != wanted:
        raise LocateError(
            f"the template's generation markers give {len(spans)} assistant span(s) for {wanted} assistant turn(s)"
        )
    return ids, spans


def _rendered_spans(tok: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Render turn by turn: the assistant content sits right after the rendering of the turns
    before it with the generation prompt; its tokens are found through their character offsets."""
    full = tok.apply_chat_template(messages, tokenize=False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = [int(i) for i in enc["input_ids"]]
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    chars: list[tuple[int, int]] = []  # (content start, content end) in characters
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        k = sum(1 for m in messages[:i] if m["role"] == "assistant") + 1
        try:
            prefix = (
                tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True) if i else ""
            )
        except Exception as exc:
            raise LocateError(
                f"assistant turn {k}: the template cannot render the turns before it ({exc})"
            ) from None
        if not full.startswith(prefix):
            raise LocateError(
                f"assistant turn {k}: rendering the turns before it is not a prefix of the whole conversation"
            )
        content = message["content"].strip()
        start = full.find(content, len(prefix))
        if start < 0 or full[len(prefix) : start].strip():
            raise LocateError(
                f"assistant turn {k}: its content is not where the template puts the assistant reply"
            )
        chars.append((start, start + len(content)))
    spans = []
    for k, (a, b) in enumerate(chars):
        inside = [j for j, (s, e) in enumerate(offsets) if s < b and e > a]
        if not inside:
            raise LocateError(f"assistant turn {k + 1}: no token covers its content")
        spans.append((inside[0], inside[-1] + 1))
    return ids, spans


def encode_chat(tok: Any, messages: list[dict[str, str]], train_on: str) -> Encoded:
    """ids and labels of one conversation; a conversation that cannot be located keeps its ids,
    gets no label, and says why (`problem`)."""
    specials = special_ids(tok)
    try:
        if has_generation_markers(tok):
            ids, spans = _marked_spans(tok, messages)
        else:
            ids, spans = _rendered_spans(tok, messages)
        turns, ends = _close(tok, ids, spans, specials)
    except LocateError as exc:
        try:
            ids = _as_list(tok.apply_chat_template(messages, tokenize=True, return_dict=True))
        except Exception:
            ids = []
        return Encoded(ids, [IGNORE] * len(ids), len(ids), problem=str(exc))
    labels = [IGNORE] * len(ids)
    chosen = turns[-1:] if train_on == "last_assistant" else turns
    if train_on == "all":
        labels = list(ids)
    else:
        for positions in chosen:
            for j in positions:
                labels[j] = ids[j]
    return Encoded(ids, labels, chosen[0][0] if chosen else len(ids), ends)


def encode_prompt_completion(tok: Any, prompt: str, completion: str, eos: int, train_on: str) -> Encoded:
    head = [int(i) for i in tok(prompt, add_special_tokens=True)["input_ids"]]
    tail = [int(i) for i in tok(completion, add_special_tokens=False)["input_ids"]] + [eos]
    ids = head + tail
    labels = list(ids) if train_on == "all" else [IGNORE] * len(head) + tail
    return Encoded(ids, labels, len(head), {eos})


def encode_text(tok: Any, text: str, eos: int) -> Encoded:
    """Plain text: every token is supervised, the closing EOS included; there is no prompt."""
    ids = [int(i) for i in tok(text, add_special_tokens=True)["input_ids"]] + [eos]
    return Encoded(ids, list(ids), 0, {eos})


def chat_prompt(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    """The ids a model sees before it answers: the turns so far and the assistant header."""
    return _as_list(
        tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True)
    )
