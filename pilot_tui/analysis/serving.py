"""Settings that decide how an exported model is served, checked before it is (R26). Pure: no torch.

A model trained with gradient checkpointing often keeps `use_cache = false` in its config, so
every served token recomputes the whole prefix; a `generation_config` whose `eos_token_id` lacks
the token that closes an assistant turn makes the served model talk past the end of its turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..core.verdict import PASS, WARN
from .checks import Check


def eos_ids(value: Any) -> set[int]:
    """`eos_token_id` as configs write it: an int, a list of ints, or nothing."""
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return {int(v) for v in value if isinstance(v, int)}
    return set()


def served_eos(
    generation: Mapping[str, Any] | None, config: Mapping[str, Any] | None
) -> tuple[set[int], str]:
    """The ids generation stops at and where they come from: `generation_config` first (what
    `generate` and most servers read), else the model config."""
    if generation and generation.get("eos_token_id") is not None:
        return eos_ids(generation.get("eos_token_id")), "generation_config eos_token_id"
    return eos_ids((config or {}).get("eos_token_id")), "config eos_token_id"


def missing_end_tokens(
    end_ids: Iterable[int], eos: set[int], where: str, decode: Callable[[int], str] | None = None
) -> str:
    """'' when every token that ends a turn stops generation, else the sentence saying which not."""
    missing = sorted(set(int(t) for t in end_ids) - eos)
    if not missing:
        return ""
    named = ", ".join(f"{decode(t)!r} (id {t})" if decode else f"id {t}" for t in missing)
    return (
        f"{where} {sorted(eos)} does not include {named}, the token that ends an assistant turn: "
        "the served model would not stop at the end of its turn (add it to eos_token_id)"
    )


def training_only(use_cache: Any) -> str:
    """'' unless the config keeps the training-only `use_cache = false`."""
    if use_cache is False:
        return (
            "config use_cache = false (left by gradient checkpointing or a trainer): served generation "
            "would recompute the whole prefix for every token (set use_cache = true before saving)"
        )
    return ""


def eos_check(
    end_ids: Sequence[int],
    generation: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None,
    decode: Callable[[int], str] | None = None,
) -> Check:
    """The `eos_tokens` check of `inspect`: the turn-ending tokens against the served EOS ids."""
    eos, where = served_eos(generation, config)
    if not end_ids:
        return Check("eos_tokens", PASS, "no end-of-turn token to check against eos_token_id")
    problem = missing_end_tokens(end_ids, eos, where, decode)
    if problem:
        return Check("eos_tokens", WARN, problem, len(set(end_ids) - eos))
    return Check("eos_tokens", PASS, f"{where} {sorted(eos)} stops at every end-of-turn token")
