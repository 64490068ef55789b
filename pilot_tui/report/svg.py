"""Inline SVG plots for the report: line charts, a histogram, memory bars. Pure text, no script.

Every name that reaches the markup is HTML-escaped here (`attr`), numbers are formatted floats:
a record's text can never become markup, and the plot needs nothing from the network.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.text import one_line

# Colour-blind-safe (Okabe–Ito), then cycled.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442", "#000000")
# A curve is drawn from at most this many points: thousands of steady updates stay a few KiB.
MAX_POINTS = 400


def attr(value: object, limit: int = 200) -> str:
    """Record text for an attribute or an element's content: one line, bounded, HTML-escaped."""
    return html.escape(one_line(value, limit), quote=True)


@dataclass(frozen=True)
class Series:
    """One curve: its name (a run, a phase) and its (x, y) points, finite ones only."""

    name: str
    points: tuple[tuple[float, float], ...]


def finite_points(xs: Sequence[object], ys: Sequence[object]) -> tuple[tuple[float, float], ...]:
    """Pairs whose both coordinates are finite numbers (bools and text are not numbers)."""
    out = []
    for x, y in zip(xs, ys, strict=False):
        if _num(x) and _num(y):
            out.append((float(x), float(y)))  # type: ignore[arg-type]
    return tuple(out)


def _num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def thin(points: Sequence[tuple[float, float]], most: int = MAX_POINTS) -> list[tuple[float, float]]:
    """At most `most` points, evenly strided, the first and the last always kept."""
    if len(points) <= most:
        return list(points)
    stride = (len(points) - 1) / (most - 1)
    return [points[round(i * stride)] for i in range(most)]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    markers: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """An SVG with one `<polyline data-run=NAME>` per series that has two points or more, and
    `markers` (e.g. validation points) as dots in the colour of the series of the same name."""
    drawn = [s for s in series if len(s.points) >= 2]
    if not drawn:
        return ""
    dots = {s.name: list((markers or {}).get(s.name, ())) for s in drawn}
    xs = [x for s in drawn for x, _ in s.points] + [x for p in dots.values() for x, _ in p]
    ys = [y for s in drawn for _, y in s.points] + [y for p in dots.values() for _, y in p]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    left, right, top, bottom = 56, 12, 12, 36
    w, h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * h

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
        f"<title>{attr(title)}</title>",
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" class="plot"/>',
        _tick(left - 4, top + 10, _fmt(y1), "end"),
        _tick(left - 4, top + h, _fmt(y0), "end"),
        _tick(left, top + h + 14, _fmt(x0), "start"),
        _tick(left + w, top + h + 14, _fmt(x1), "end"),
        _tick(left + w / 2, height - 4, attr(x_label), "middle"),
        f'<text x="12" y="{top + h / 2:.1f}" transform="rotate(-90 12 {top + h / 2:.1f})" '
        f'text-anchor="middle" class="tick">{attr(y_label)}</text>',
    ]
    for i, s in enumerate(drawn):
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in thin(s.points))
        colour = PALETTE[i % len(PALETTE)]
        parts.append(
            f'<polyline data-run="{attr(s.name)}" points="{pts}" fill="none" stroke="{colour}" '
            f'stroke-width="1.5"><title>{attr(s.name)}</title></polyline>'
        )
        parts += [
            f'<circle class="dot" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>'
            for x, y in dots[s.name]
        ]
    parts.append("</svg>")
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>{attr(s.name)}</li>'
        for i, s in enumerate(drawn)
    )
    return "".join(parts) + f'<ul class="legend">{legend}</ul>'


def _tick(x: float, y: float, text: str, anchor: str) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="tick">{text}</text>'


def histogram(values: Sequence[float], *, title: str, x_label: str, bins: int = 30, width: int = 640) -> str:
    """An SVG histogram of finite `values` (e.g. the steady step times), with p50 and p90 marked."""
    data = sorted(v for v in values if _num(v))
    if len(data) < 2:
        return ""
    height, left, bottom, top = 200, 56, 36, 12
    w, h = width - left - 12, height - top - bottom
    lo, hi = data[0], data[-1]
    span = (hi - lo) or 1.0
    counts = [0] * bins
    for v in data:
        counts[min(int((v - lo) / span * bins), bins - 1)] += 1
    most = max(counts)
    bar = w / bins
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
        f"<title>{attr(title)}</title>",
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" class="plot"/>',
    ]
    for i, c in enumerate(counts):
        if c:
            bh = c / most * h
            parts.append(
                f'<rect class="bar" x="{left + i * bar:.1f}" y="{top + h - bh:.1f}" '
                f'width="{max(bar - 1, 0.5):.1f}" height="{bh:.1f}"/>'
            )
    for q, name in ((0.5, "p50"), (0.9, "p90")):
        v = data[min(int(q * len(data)), len(data) - 1)]
        x = left + (v - lo) / span * w
        parts.append(f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + h}"/>')
        parts.append(_tick(x + 2, top + 10, f"{name} {_fmt(v)}", "start"))
    parts += [
        _tick(left - 4, top + 10, str(most), "end"),
        _tick(left, top + h + 14, _fmt(lo), "start"),
        _tick(left + w, top + h + 14, _fmt(hi), "end"),
        _tick(left + w / 2, height - 4, attr(x_label), "middle"),
        "</svg>",
    ]
    return "".join(parts)


def bar(value: float | None, most: float, kind: str, width: int = 180) -> str:
    """A one-line SVG bar, `value` out of `most` (allocated, reserved or RSS)."""
    if value is None or not _num(value) or most <= 0:
        return ""
    length = max(min(value / most, 1.0) * width, 0.5)
    return (
        f'<svg class="bar-{kind}" width="{width}" height="10">'
        f'<rect x="0" y="1" width="{length:.1f}" height="8" class="{kind}"/></svg>'
    )
