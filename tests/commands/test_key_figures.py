"""A pass row's headless line says what the phase measured, not "all checks passed"."""

from __future__ import annotations

from pilot_tui.commands.headless import phase_line
from pilot_tui.core.rows import phase_row


def _row(name: str, details: dict, reason: str = "") -> dict:
    return phase_row(
        name=name,
        step=name,
        variant="control",
        verdict="pass",
        reason=reason,
        started="2026-12-04T00:00:00",
        duration_s=1.0,
        params={},
        memory={"peak_rss_mb": 100.0},
        details=details,
    )


def test_pass_rows_show_their_key_figure() -> None:
    steady = _row(
        "steady",
        {"step_s_mean": 0.01022, "step_s_ci95": 0.00029, "timed_updates": 150, "tokens_per_s": 29618.4},
    )
    assert phase_line(steady, None).endswith("10.22 ± 0.29 ms per update over 150 timed; 29,618 tokens/s")
    save = _row("save", {"size_mb": 1.44, "save_s": 0.0071})
    assert phase_line(save, None).endswith("1.4 MiB checkpoint; saved in 0.007 s")
    resume = _row("resume", {"k": 20, "n": 8, "comparison": "bitwise"})
    assert phase_line(resume, None).endswith(
        "resumed after update 20 in a new process: 8 updates compared (bitwise)"
    )
    first = _row("first_step", {"loss": 4.8551, "grad_norm": 1.4811, "optimizer_state_mb": 0.93})
    assert "first update loss 4.855; grad norm 1.48" in phase_line(first, None)


def test_a_row_without_figures_or_with_its_own_reason_keeps_it() -> None:
    assert phase_line(_row("steady", {}), None).endswith("all checks passed")
    # A hostile value is no figure: the line falls back, never shows the text as a number.
    odd = _row("save", {"size_mb": "<script>", "save_s": float("nan")})
    assert phase_line(odd, None).endswith("all checks passed")
    said = _row("overfit", {"steps": 36}, reason="loss 0.039 after 36 steps")
    assert phase_line(said, None).endswith("loss 0.039 after 36 steps")
