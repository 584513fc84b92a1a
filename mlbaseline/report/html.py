"""The HTML report (`--html`): the Markdown report converted, every figure inline, nothing fetched.

The Markdown stays the one source of the report's content: this module converts it with
markdown-it-py (CommonMark with tables; raw HTML such as the `<details>` appendix passes
through, and Markdown between its tags is converted as CommonMark says), so the two files can
never say different things. What the conversion adds:
- each figure as a `data:` URL, so the file views alone, offline, mailed or attached to a CI
  run; a figure that is not a local file is shown as its alt text, never fetched;
- ids on headings (links to a section), a small inline stylesheet, system fonts only;
- the history trend as an inline SVG whose points name their run and value on hover and whose
  legend hides a line on click: the one figure where reading exact values across runs helps.
No script, stylesheet, font or image is loaded from anywhere (no URL in any src or href that
loads); `tests/test_report_html.py` checks that in headless Chromium.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from mlbaseline.formatting import number, value

__all__ = ["MEDIA_TYPES", "data_url", "markdown_to_html", "trend_svg"]

MEDIA_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg"}
# a src attribute in raw HTML (the Markdown's own <img> tags, if any)
_SRC = re.compile(r"""(\bsrc\s*=\s*)(["'])(.*?)\2""", re.IGNORECASE | re.DOTALL)
_EMPTY = "data:,"  # an empty image: a src that cannot be inlined must not be fetched either

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;line-height:1.45;
max-width:72rem;margin:2rem auto;padding:0 1rem;color:#1f2328;background:#fff}
h1,h2,h3{line-height:1.2}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0 1em;font-variant-numeric:tabular-nums;
display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.25em .6em;vertical-align:top}th{background:#f6f8fa}
img{max-width:100%;height:auto}code{background:#f6f8fa;padding:.1em .3em;border-radius:4px}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto}
details{border:1px solid #d0d7de;border-radius:6px;padding:.5em 1em;margin:1em 0}
summary{cursor:pointer;font-weight:600}
.trend text{font-size:11px;fill:#444}.trend .series{cursor:pointer}
.trend .off{opacity:.12}.trend circle:hover{r:6}
"""

# toggles a trend line from its legend entry; the page works without it (the SVG is static)
TREND_SCRIPT = """
for(const k of document.querySelectorAll('.trend .key')){k.addEventListener('click',()=>{
for(const e of k.closest('svg').querySelectorAll('[data-line="'+k.dataset.line+'"]'))
{e.classList.toggle('off')}})}
"""


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def data_url(rel: str, base: Path) -> str | None:
    """`rel` (a path relative to `base`) as a `data:` URL; None for anything that is not a
    local image file inside `base` (a URL, an absolute path, `..`, a missing file)."""
    if not rel or rel.startswith(("data:", "/", "\\")) or re.match(r"^[a-zA-Z][\w+.-]*:", rel):
        return None
    root = base.resolve()
    path = (root / rel).resolve()
    media = MEDIA_TYPES.get(path.suffix.lower())
    if media is None or not path.is_relative_to(root) or not path.is_file():
        return None
    return f"data:{media};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _inline_image(tok: Token, base: Path) -> Token:
    """The image token with its figure inline, or its alt text when it cannot be inlined."""
    src = str(tok.attrGet("src") or "")
    if src.startswith("data:"):
        return tok
    url = data_url(src, base)
    if url is None:
        text = Token("text", "", 0)
        text.content = f"[figure not available: {tok.content or src}]"
        return text
    tok.attrSet("src", url)
    return tok


def _inline_raw(content: str, base: Path) -> str:
    """Every src in a raw HTML fragment inlined, or emptied: never left pointing elsewhere."""

    def swap(m: re.Match[str]) -> str:
        src = html.unescape(m.group(3))
        url = src if src.startswith("data:") else data_url(src, base) or _EMPTY
        return f"{m.group(1)}{m.group(2)}{url}{m.group(2)}"

    return _SRC.sub(swap, content)


def _slug(text: str, taken: set[str]) -> str:
    slug = re.sub(r"[^\w]+", "-", text.lower()).strip("-") or "section"
    out, n = slug, 1
    while out in taken:
        n += 1
        out = f"{slug}-{n}"
    taken.add(out)
    return out


def _html_block(content: str) -> Token:
    tok = Token("html_block", "", 0, block=True)
    tok.content = content + "\n"
    return tok


def _rewrite(tokens: list[Token], base: Path, after: Mapping[str, str]) -> list[Token]:
    """Figures inlined, headings given ids, and each `after[src]` snippet placed after the
    paragraph that holds the figure `src`."""
    out: list[Token] = []
    taken: set[str] = set()
    pending: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            tok.attrSet("id", _slug(tokens[i + 1].content, taken))
        elif tok.type in ("html_block", "html_inline"):
            tok.content = _inline_raw(tok.content, base)
        elif tok.type == "inline" and tok.children:
            for child in tok.children:
                if child.type == "image" and str(child.attrGet("src")) in after:
                    pending.append(after[str(child.attrGet("src"))])
                if child.type == "html_inline":
                    child.content = _inline_raw(child.content, base)
            tok.children = [
                _inline_image(c, base) if c.type == "image" else c for c in tok.children
            ]
        out.append(tok)
        if pending and tok.type == "paragraph_close":
            out += [_html_block(p) for p in pending]
            pending = []
    return out + [_html_block(p) for p in pending]


def _title(markdown: str) -> str:
    first = next((ln for ln in markdown.splitlines() if ln.startswith("# ")), "# mlb report")
    return first[2:].strip()


def markdown_to_html(markdown: str, base: Path, after: Mapping[str, str] | None = None) -> str:
    """A whole, self-contained HTML page of `markdown`, whose figure paths are relative to
    `base` (the folder the figures were drawn into). `after`: raw HTML to place after the
    paragraph of a figure, by the figure's relative path (the interactive history trend)."""
    md = _parser()
    tokens = _rewrite(md.parse(markdown), Path(base), after or {})
    body = md.renderer.render(tokens, md.options, {})
    script = f"<script>{TREND_SCRIPT}</script>\n" if 'class="trend"' in body else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(_title(markdown))}</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n{body}{script}</body>\n</html>\n"
    )


# ---------------------------------------------------------------- the interactive trend

_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 760, 300, 64, 190, 16, 40
Project = Callable[[float, float], tuple[float, float]]  # (run position, value) -> (x, y) px
_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


def _scale(unit: str) -> tuple[float, str]:
    """Seconds drawn in milliseconds (as the PNG trend does); other units as they are."""
    return (1e3, "ms") if unit == "s" else (1.0, unit or "value")


def _extent(lines: Sequence[Any], factor: float) -> tuple[float, float]:
    ys = [
        v * factor
        for line in lines
        for v in [*line.medians, *line.lows, *line.highs]
        if v is not None
    ]
    low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def _point_title(name: str, run: str, line: Any, i: int, unit: str) -> str:
    lo, hi = line.lows[i], line.highs[i]
    ci = "" if lo is None or hi is None else f" [{value(lo, unit)}, {value(hi, unit)}]"
    return f"{name}, run {run}: {value(line.medians[i], unit)}{ci}"


def _series(n: int, name: str, line: Any, runs: Sequence[str], unit: str, xy: Project) -> list[str]:
    colour = _COLOURS[n % len(_COLOURS)]
    pts = [xy(p, m) for p, m in zip(line.positions, line.medians, strict=True)]
    out = [f'<g class="series" data-line="{n}">']
    out.append(
        f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        + '"/>'
    )
    for i, (x, y) in enumerate(pts):
        lo, hi = line.lows[i], line.highs[i]
        if lo is not None and hi is not None:  # the 95% CI as a whisker behind the point
            (_, y_lo), (_, y_hi) = xy(line.positions[i], lo), xy(line.positions[i], hi)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y_lo:.1f}" y2="{y_hi:.1f}" '
                f'stroke="{colour}" stroke-opacity=".4" stroke-width="3"/>'
            )
        run = runs[line.positions[i]] if line.positions[i] < len(runs) else "?"
        tip = html.escape(_point_title(name, run, line, i, unit))
        dot = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">'
        out.append(f"{dot}<title>{tip}</title></circle>")
    out.append("</g>")
    key_y = _TOP + 14 + 18 * n
    out.append(
        f'<g class="key" data-line="{n}"><rect x="{_W - _RIGHT + 12}" y="{key_y - 9}" width="12" '
        f'height="12" fill="{colour}"/><text x="{_W - _RIGHT + 30}" y="{key_y + 1}">'
        f"{html.escape(name)}</text></g>"
    )
    return out


def _run_axis(runs: Sequence[str], marks: Sequence[Any], plot_w: float, xy: Project) -> list[str]:
    """Run labels under the axis (at most ~10) and the change points as dashed lines."""
    out = []
    step = max(1, len(runs) // 10)
    for pos in range(0, len(runs), step):
        x, _ = xy(pos, 0.0)
        out.append(
            f'<text x="{x:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">'
            f"{html.escape(runs[pos])}</text>"
        )
    out.append(
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_H - 6}" text-anchor="middle">'
        "run (oldest → newest)</text>"
    )
    for mark in marks:  # between the last run before the change and the first after
        x, _ = xy(mark.position - 0.5, 0.0)
        kind = "suspected change (needs more runs)" if mark.suspected else "change point"
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" stroke="#c44e52" '
            f'stroke-dasharray="{"2 3" if mark.suspected else "6 4"}"><title>'
            f"{kind}: {html.escape(mark.label)}</title></line>"
        )
    return out


def _line_unit(line: Any, view: Any) -> str:
    # a line may carry its own unit (one axis per unit); else the view's
    return str(getattr(line, "unit", "") or view.unit)


def trend_svg(view: Any) -> str:
    """The history trend (a `HistoryView`) as inline SVG, one chart per result kind and unit
    (never two units on one axis): a point per run whose tooltip gives the run, the median and
    its 95% CI; click a legend entry to hide its line. Empty when the view has no line."""
    lines = [ln for ln in view.lines if ln.medians]
    if not lines or not view.runs:
        return ""

    def key(line: Any) -> tuple[str, str]:
        return str(getattr(line, "kind", "")), _line_unit(line, view)

    charts = []
    keys = list(dict.fromkeys(key(ln) for ln in lines))
    for kind, unit in keys:
        title = f"{view.title} ({kind})" if kind and len({k for k, _ in keys}) > 1 else view.title
        chosen = [ln for ln in lines if key(ln) == (kind, unit)]
        marks = [m for m in view.marks if getattr(m, "kind", "") in ("", kind)]
        charts.append(_unit_svg(view, chosen, unit, title, marks))
    return "\n".join(charts)


def _unit_svg(
    view: Any, lines: Sequence[Any], unit_name: str, title: str, marks: Sequence[Any]
) -> str:
    factor, unit = _scale(unit_name)
    low, high = _extent(lines, factor)
    span = max(1, len(view.runs) - 1)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def xy(pos: float, median: float) -> tuple[float, float]:
        return (  # 12 px inside the frame, so the first and last points are whole
            _LEFT + 12 + (plot_w - 24) * pos / span,
            _TOP + plot_h * (1 - (median * factor - low) / (high - low)),
        )

    out = [
        f'<figure><svg class="trend" viewBox="0 0 {_W} {_H}" width="100%" role="img" '
        f'aria-label="{html.escape(title)} ({html.escape(unit)})">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#d0d7de"/>',
    ]
    for k in range(5):  # five y ticks, labelled through the one formatter
        v = low + (high - low) * k / 4
        y = _TOP + plot_h * (1 - k / 4)
        out.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{number(v)}</text>')
    out.append(
        f'<text x="14" y="{_TOP + plot_h / 2:.1f}" transform="rotate(-90 14 '
        f'{_TOP + plot_h / 2:.1f})" text-anchor="middle">median ({html.escape(unit)})</text>'
    )
    out += _run_axis(view.runs, marks, plot_w, xy)
    series = list(dict.fromkeys(str(getattr(ln, "series", "")) for ln in lines))
    for n, line in enumerate(lines):
        # a metric in several comparable series: the series names the line apart
        name = f"{line.label} ({line.series})" if len(series) > 1 else line.label
        out += _series(n, name, line, view.runs, unit_name, xy)
    out.append("</svg>")
    out.append(
        f"<figcaption>{html.escape(title)}, median ({html.escape(unit)}) per run. "
        "Interactive: hover a point for its run, median and 95% CI; click a legend entry to "
        "hide or show its line.</figcaption></figure>"
    )
    return "\n".join(out)
