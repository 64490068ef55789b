"""The report's sections, each a function from what the record holds to an HTML fragment.

Every string from the record goes through `esc` (control characters made visible, bounded,
HTML-escaped): a hostile record shows its text and runs nothing.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.plan import Decision, Plan, text_lines
from ..core.key_figures import shown_reason
from ..core.rows import PhaseRow, read_rows
from ..core.text import clean
from .compare import MATCH, Difference
from .curves import curve_groups, step_times
from .svg import bar, histogram, line_chart


def esc(value: Any, limit: int = 2000) -> str:
    """Record text as HTML text: control characters escaped, bounded, `<>&"'` escaped."""
    return html.escape(clean(value, limit), quote=True)


def section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{esc(title)}</h2>{body}</section>'


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """A table whose cells are already HTML (each caller escapes what it puts in)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def decision(d: Decision, plan: Plan) -> str:
    verdict = "rent" if d.rent else "hold"
    items = "".join(f"<dt>{esc(line.label)}</dt><dd>{esc(line.text)}</dd>" for line in d.lines)
    caveats = "".join(f"<li>{esc(c)}</li>" for c in plan.caveats)
    body = f'<dl class="decision {verdict}">{items}</dl>'
    if caveats:
        body += f'<ul class="caveats">{caveats}</ul>'
    return section("decision", "Decision", body)


def comparison(names: tuple[str, str], found: Sequence[Difference]) -> str:
    head = f"<p>A = {esc(names[0])}<br>B = {esc(names[1])}</p>"
    if not found:
        return section("compare", "Against another record", head + f"<p>{esc(MATCH)}</p>")
    rows = [
        [esc(d.section), esc(d.item), esc(d.a), esc(d.b), f"{d.ratio:.2f}×" if d.ratio is not None else ""]
        for d in found
    ]
    return section(
        "compare", "Against another record: what differs", head + _table(["", "what", "A", "B", "B/A"], rows)
    )


def _verdict(row: PhaseRow) -> str:
    v = row.verdict.value
    return f'<span class="v {esc(v)}">{esc(v)}</span>'


def gates(data: Mapping[str, Any]) -> str:
    rows = [
        [
            esc(r.recorded_key or r.key),
            _verdict(r),
            f"{r.duration_s:.3g} s" if r.duration_s is not None else "",
            esc(r.memory.compact()),
            esc(shown_reason(r), 600),
        ]
        for r in read_rows(data.get("phases"))
    ]
    return section("gates", "Gates", _table(["step", "verdict", "time", "memory", "reason"], rows, "gates"))


def curves(data: Mapping[str, Any]) -> str:
    charts = [
        f"<h3>{esc(g.title)}</h3>"
        + line_chart(g.series, title=g.title, x_label=g.x_label, y_label="loss", markers=g.markers)
        for g in curve_groups(data)
    ]
    board = data.get("board")
    if isinstance(board, Mapping) and board.get("decision"):
        charts.append(f'<p class="board">LR board: {esc(board.get("decision"))}</p>')
    if not charts:
        return section("curves", "Loss curves", "<p>The record holds no loss curve.</p>")
    return section("curves", "Loss curves", "".join(charts))


def memory(data: Mapping[str, Any]) -> str:
    """Per phase (and per rank): peak allocated and peak reserved side by side, never summed."""
    entries: list[tuple[str, Any]] = []
    for r in read_rows(data.get("phases")):
        if not r.memory.measured:
            continue
        entries.append((r.recorded_key or r.key, r.memory))
        entries += [(f"{r.key} · rank {rank.rank}", rank.memory) for rank in r.ranks if rank.memory.measured]
    if not entries:
        return section("memory", "Memory per phase", "<p>No memory reading in the record.</p>")
    cuda = any(m.on_cuda for _, m in entries)
    most = max((v for _, m in entries for v in m.peaks().values()), default=0.0)
    if cuda:
        head = ["step", "peak allocated (tensors)", "", "peak reserved (caching allocator)", ""]
        rows = [
            [
                esc(k),
                _mib(m.peak_allocated_mb),
                bar(m.peak_allocated_mb, most, "alloc"),
                _mib(m.peak_reserved_mb),
                bar(m.peak_reserved_mb, most, "res"),
            ]
            for k, m in entries
        ]
        note = "Allocated and reserved are different counters: they are never added."
    else:
        head = ["step", "peak RSS (whole CPU process)", ""]
        rows = [[esc(k), _mib(m.peak_rss_mb), bar(m.peak_rss_mb, most, "rss")] for k, m in entries]
        note = "Measured on the CPU: the whole process's resident memory, not a GPU figure."
    return section("memory", "Memory per phase", f"<p>{note}</p>" + _table(head, rows, "memory"))


def _mib(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f} MiB"


def step_time(data: Mapping[str, Any]) -> str:
    found = step_times(data)
    charts = [
        f"<h3>{esc(key)} ({len(times)} timed updates)</h3>"
        + histogram(times, title=f"step times {key}", x_label="seconds per update")
        for key, times in found
        if len(times) >= 2
    ]
    if not charts:
        return section("steps", "Steady step times", "<p>The record holds no single step times.</p>")
    return section("steps", "Steady step times", "".join(charts))


def plan_details(plan: Plan) -> str:
    order = plan.package.order
    timeline = ""
    total = max((o.end_h for o in order), default=0.0)
    if total > 0:
        bars = "".join(
            f'<div class="slot" style="left:{o.start_h / total * 100:.2f}%;width:{max((o.end_h - o.start_h) / total * 100, 0.3):.2f}%" '
            f'title="{esc(o.id)}">{esc(o.id)}</div>'
            for o in order
        )
        timeline = f'<div class="timeline">{bars}</div><p class="small">0 h … {total:.2f} h</p>'
    text = "\n".join(esc(line) for line in text_lines(plan))
    return section("plan", "Plan details", timeline + f"<pre>{text}</pre>")


def machine(data: Mapping[str, Any]) -> str:
    """The machine check's row: its checks, and each place the run writes with its figures."""
    row = next((r for r in read_rows(data.get("phases")) if r.name == "machine"), None)
    if row is None:
        return section("machine", "The machine", "<p>The record holds no machine check.</p>")
    d = row.details
    checks = [
        [
            esc(c.get("name", "")),
            f'<span class="v {esc(c.get("verdict", ""))}">{esc(c.get("verdict", ""))}</span>',
            esc(c.get("message", ""), 600),
        ]
        for c in d.get("checks") or []
        if isinstance(c, Mapping)
    ]
    places = [
        [
            esc(p.get("role", "")),
            esc(p.get("path", "")),
            esc(p.get("free_gib", "")),
            esc(p.get("write_gbps", "")),
            esc(p.get("need", ""), 300),
        ]
        for p in d.get("locations") or []
        if isinstance(p, Mapping)
    ]
    cpu = ""
    if isinstance(d.get("cpu_gemm_gflops"), int | float):
        cpu = (
            f"<p>CPU: GEMM {esc(d['cpu_gemm_gflops'])} GFLOP/s, memory {esc(d.get('cpu_memory_gbps', ''))} GB/s "
            f"— {esc(d.get('cpu_note', ''))}</p>"
        )
    body = (
        f"<p>{_verdict(row)} {esc(shown_reason(row), 600)}</p>"
        + cpu
        + _table(["check", "verdict", "what it found"], checks, "gates")
        + _table(
            ["writes to", "path", "free GiB", "write GB/s", "what the run writes there"], places, "gates"
        )
    )
    return section("machine", "The machine", body)


def notes(data: Mapping[str, Any]) -> str:
    items = [
        f"<li><b>{esc(n.get('target', ''))}</b> {esc(n.get('text', ''))} <span class='small'>{esc(n.get('time', ''))}</span></li>"
        for n in data.get("notes") or []
        if isinstance(n, Mapping)
    ]
    body = f"<ul>{''.join(items)}</ul>" if items else "<p>No notes.</p>"
    c = data.get("conclusion")
    if isinstance(c, Mapping) and c.get("text"):
        decided = f" (decision: {esc(c.get('decision'))})" if c.get("decision") else ""
        body += f"<h3>Conclusion</h3><p>{esc(c.get('text'))}{decided}</p>"
    else:
        body += "<p>No conclusion written yet (<code>pilot-tui conclude</code>).</p>"
    return section("notes", "Notes and conclusion", body)


def environment(data: Mapping[str, Any]) -> str:
    env = data.get("environment") if isinstance(data.get("environment"), Mapping) else {}
    rows = []
    for key, value in env.items():  # type: ignore[union-attr]
        if isinstance(value, Mapping):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = "; ".join(
                ", ".join(f"{k} {v}" for k, v in item.items()) if isinstance(item, Mapping) else str(item)
                for item in value
            )
        rows.append([esc(key), esc(value)])
    campaign = data.get("campaign") if isinstance(data.get("campaign"), Mapping) else {}
    ident = [
        [esc(k), esc(campaign.get(k, ""))] for k in ("name", "id", "created", "spec_path", "spec_sha256")
    ]  # type: ignore[union-attr]
    spec = esc(campaign.get("spec_text", ""), 100_000)  # type: ignore[union-attr]
    return section(
        "environment",
        "Environment and campaign",
        _table(["", ""], ident, "kv")
        + _table(["", ""], rows, "kv")
        + f"<h3>Campaign spec</h3><pre>{spec}</pre>",
    )
