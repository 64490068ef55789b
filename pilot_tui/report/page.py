"""The report's page: one HTML document with its stylesheet inline, no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence

from .sections import esc

# System fonts only: a font from the network would be a request the report promises not to make.
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1100px;
  padding:0 1em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
h3{font-size:1em;margin:1em 0 .3em}
.small{color:#666;font-size:.85em}
dl.decision{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em;padding:.8em 1em;
  border-left:6px solid #2a7;background:#f3fbf6}
dl.decision.hold{border-color:#c33;background:#fdf3f3}
dl.decision dt{font-weight:600}dl.decision dd{margin:0}
ul.caveats{color:#7a4b00}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}
th,td{border-bottom:1px solid #e3e3e3;padding:.25em .6em;text-align:left;vertical-align:top}
table.kv td:first-child{font-weight:600;white-space:nowrap}
table.gates td:nth-child(-n+4){white-space:nowrap}
.v{font-weight:600;padding:0 .4em;border-radius:3px}.v.pass{background:#d9f2e3}.v.warn{background:#fff0c2}
.v.fail{background:#f8d0d0}
svg .plot{fill:#fafafa;stroke:#ccc}svg .tick{font-size:11px;fill:#555}svg .bar{fill:#0072b2}
svg .mark{stroke:#d55e00;stroke-dasharray:3 2}
.alloc{fill:#0072b2}.res{fill:#e69f00}.rss{fill:#009e73}
ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.4em 1.2em;font-size:.9em}
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.timeline{position:relative;height:1.6em;background:#f0f0f0;margin:.5em 0}
.slot{position:absolute;top:0;bottom:0;background:#56b4e9;border-right:1px solid #fff;overflow:hidden;
  font-size:11px;padding-left:2px;white-space:nowrap}
"""


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """The whole document; `sections` are HTML fragments already escaped by their makers."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        # No request may leave the page: nothing but inline styles and inline images.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><p class="small">{esc(subtitle)}</p></header>'
        + "".join(sections)
        + "</body></html>\n"
    )
