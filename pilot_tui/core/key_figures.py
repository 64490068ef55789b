"""What a passing phase measured, in a few words: the line a pass row shows instead of "all checks
passed" (headless and logs). Read from the row's own details only; a figure the row lacks is left
out, never guessed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .rows import ALL_PASSED, PhaseRow, number


def _n(details: Mapping[str, Any], key: str) -> float | None:
    return number(details.get(key))  # a finite number, else None (absent, text, NaN)


def _inspect(d: Mapping[str, Any]) -> list[str]:
    out = []
    if (scanned := _n(d, "examples_scanned")) is not None:
        out.append(f"{scanned:,.0f} examples scanned")
    if (tokens := _n(d, "supervised_tokens")) is not None:
        out.append(f"{tokens:,.0f} supervised tokens")
    if (longest := _n(d, "raw_length_max")) is not None:
        out.append(f"longest {longest:,.0f} tokens")
    return out


def _split(d: Mapping[str, Any]) -> list[str]:
    key = d.get("group_key")
    if not isinstance(key, str) or not key:
        return []
    shared, same = _n(d, "shared_groups_count"), _n(d, "same_input_count")
    parts = [f"grouped by {key!r}"]
    if shared is not None:
        parts.append(f"{shared:.0f} groups in two splits")
    if same is not None:
        parts.append(f"{same:.0f} inputs seen in two splits")
    return [", ".join(parts)]


def _load(d: Mapping[str, Any]) -> list[str]:
    out = []
    if (trainable := _n(d, "trainable_parameters")) is not None:
        total = _n(d, "parameters")
        out.append(
            f"{trainable:,.0f} trainable parameters"
            + (f" of {total:,.0f}" if total and total != trainable else "")
        )
    if (mb := _n(d, "weights_mb")) is not None:
        out.append(f"{mb:.1f} MiB of weights")
    return out


def _first_step(d: Mapping[str, Any]) -> list[str]:
    out = []
    if (loss := _n(d, "loss")) is not None:
        out.append(f"first update loss {loss:.4g}")
    if (gn := _n(d, "grad_norm")) is not None:
        out.append(f"grad norm {gn:.3g}")
    if (opt := _n(d, "optimizer_state_mb")) is not None:
        out.append(f"optimizer state {opt:.1f} MiB")
    return out


def _steady(d: Mapping[str, Any]) -> list[str]:
    mean, ci = _n(d, "step_s_mean"), _n(d, "step_s_ci95")
    if mean is None:
        mean = _n(d, "step_time_s")
    out = []
    if mean is not None:
        spread = f" ± {ci * 1e3:.2f}" if ci is not None and ci >= 0 else ""
        timed = _n(d, "timed_updates")
        out.append(f"{mean * 1e3:.2f}{spread} ms per update" + (f" over {timed:.0f} timed" if timed else ""))
    if (tps := _n(d, "tokens_per_s")) is not None and tps > 0:
        out.append(f"{tps:,.0f} tokens/s")
        found = d.get("mfu")
        share = _n(found, "mfu") if isinstance(found, Mapping) else None
        if share is not None:
            out.append(f"MFU {share:.1%}")
    elif (eps := _n(d, "examples_per_s")) is not None and eps > 0:
        out.append(f"{eps:,.1f} examples/s")
    return out


def _eval_longest(d: Mapping[str, Any]) -> list[str]:
    out = []
    if (loss := _n(d, "loss")) is not None:
        out.append(f"validation loss {loss:.4g} on the longest batch")
    if (s := _n(d, "forward_s")) is not None:
        out.append(f"forward {s:.3f} s")
    return out


def _save(d: Mapping[str, Any]) -> list[str]:
    size, took = _n(d, "size_mb"), _n(d, "save_s")
    out = []
    if size is not None:
        out.append(f"{size:.1f} MiB checkpoint")
    if took is not None:
        out.append(f"saved in {took:.3f} s")
    return out


def _export(d: Mapping[str, Any]) -> list[str]:
    size, tensors = _n(d, "size_mb"), _n(d, "tensors")
    return (
        [f"{size:.1f} MiB exported" + (f", {tensors:.0f} tensors" if tensors else "")]
        if size is not None
        else []
    )


def _resume(d: Mapping[str, Any]) -> list[str]:
    k, n = _n(d, "k"), _n(d, "n")
    if k is None or n is None:
        return []
    comparison = d.get("comparison")
    how = f" ({comparison})" if isinstance(comparison, str) and comparison else ""
    return [f"resumed after update {k:.0f} in a new process: {n:.0f} updates compared{how}"]


def _final(d: Mapping[str, Any]) -> list[str]:
    out = []
    if isinstance(d.get("comparison"), str):
        out.append(f"export reloaded alone, replays {d['comparison']}")
    if (s := _n(d, "fresh_process_s")) is not None:
        out.append(f"new process {s:.2f} s")
    return out


FIGURES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "inspect": _inspect,
    "split": _split,
    "load": _load,
    "first_step": _first_step,
    "steady": _steady,
    "eval_longest": _eval_longest,
    "save": _save,
    "export": _export,
    "resume": _resume,
    "final": _final,
}


def key_figure(row: PhaseRow) -> str:
    """The row's key measured figures ("" when its phase has none or the row lacks them)."""
    figures = FIGURES.get(row.name)
    if figures is None or not isinstance(row.details, Mapping):
        return ""
    try:
        return "; ".join(figures(row.details))
    except (TypeError, ValueError):  # a damaged record's odd value: no figure rather than a crash
        return ""


def shown_reason(row: PhaseRow) -> str:
    """A row's reason as a reader sees it: a pass row says what it measured, not that it passed."""
    if row.verdict == "pass" and row.reason in ("", ALL_PASSED):
        return key_figure(row) or row.reason
    return row.reason
