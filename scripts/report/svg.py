"""Line plots as inline SVG (no external resource, no plotting package).

Measured series are solid with square markers; modeled ones dashed, their marker says
the confidence of the catalog figures behind them: filled circle high, open circle
medium, cross low (and a faint band of +-factor for low/medium, where the sources say
the figure is unverified). The legend goes under the plot in as many columns as fit, and
the image grows to hold it; crowded tick labels are thinned.
"""
import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939", "#8c6d31",
           "#843c39", "#7b4173", "#3182bd", "#e6550d"]
# Half-width of the shaded band (multiplicative) by confidence: how far off such
# a figure was found to be in validation (docs/model.md) or could be, unverified.
BAND = {"medium": 1.25, "low": 1.6}
DASHES = ["7,4", "2,3", "10,3,2,3"]


def human_bytes(b):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s:
            v = b / s
            return f"{v:g} {unit}"
    return f"{b:g} B"


def _fmt_gbs(v):
    return f"{v:g}"


class Axis:
    def __init__(self, lo, hi, log, pix0, pix1):
        self.log, self.p0, self.p1 = log, pix0, pix1
        if log:
            self.lo, self.hi = math.log10(lo), math.log10(hi)
        else:
            self.lo, self.hi = lo, hi
        if self.hi <= self.lo:
            self.hi = self.lo + 1

    def __call__(self, v):
        t = math.log10(v) if self.log else v
        return self.p0 + (t - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _marker(kind, x, y, color):
    if kind == "measured":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{color}"/>'
    if kind == "high":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>'
    if kind == "medium":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="white" stroke="{color}" stroke-width="1.5"/>'
    return (f'<path d="M{x - 3:.1f},{y - 3:.1f}L{x + 3:.1f},{y + 3:.1f}M{x - 3:.1f},{y + 3:.1f}'
            f'L{x + 3:.1f},{y - 3:.1f}" stroke="{color}" stroke-width="1.5"/>')


CHAR_W = 6.4  # px per character of 11px sans-serif, a generous average (no font metrics here)


def _text_w(text, size=11):
    return len(text) * CHAR_W * size / 11


def thin_ticks(ticks, pos, label, min_gap=10):
    """The ticks whose labels do not touch the previous kept one (sorted by position):
    1000 beside 1024 on a log axis keeps one of them."""
    kept, last_right = [], None
    for v in sorted(ticks, key=pos):
        x, w = pos(v), _text_w(label(v))
        if last_right is None or x - w / 2 >= last_right + min_gap:
            kept.append(v)
            last_right = x + w / 2
    return kept


def legend_layout(labels, avail_w, row_h=17, swatch=32):
    """(columns, column width, rows): as many columns as the longest label allows, at
    least one; a label longer than a column is cut with an ellipsis (full text in a
    tooltip)."""
    longest = max((_text_w(l) for l in labels), default=0)
    col_w = max(160.0, min(longest + swatch + 14, avail_w))
    cols = max(1, int(avail_w // col_w))
    col_w = avail_w / cols
    rows = -(-len(labels) // cols)
    return cols, col_w, rows


def _fit(label, width):
    n = int(width // CHAR_W)
    return label if len(label) <= n else label[:max(1, n - 1)] + "…"


def line_plot(pid, title, series, xlabel, ylabel, xlog=True, ylog=True, xbytes=True,
              ylim=None, width=980, height=460, subtitle=""):
    """series: [{label, points: [(x, y)], measured: bool, confidence: str}] -> SVG text.
    The legend sits under the plot in columns and the image grows to hold it, so no
    entry falls outside the picture however many series there are."""
    left, right, top = 70, 20, 58 if subtitle else 40
    pw, ph = width - left - right, height - top - 60
    kinds = [("measured", "measured here (solid)"), ("high", "modeled, high confidence"),
             ("medium", "modeled, medium (band x/÷1.25)"), ("low", "modeled, low (band x/÷1.6)")]
    cols, col_w, rows = legend_layout([s["label"] for s in series], width - left - right)
    legend_top = top + ph + 74  # under the x label and the marker key
    height = legend_top + 17 * rows + 12 + 20
    pts = [(x, y) for s in series for x, y in s["points"] if x > 0 and (y > 0 or not ylog)]
    if not pts:
        pts = [(1, 1), (10, 10)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if ylog:
        ylo = 10 ** math.floor(math.log10(min(ys)))
        yhi = 10 ** math.ceil(math.log10(max(ys) * BAND["low"]))
    else:
        ylo, yhi = ylim or (0, max(ys) * 1.05)
    xlo, xhi = min(xs), max(xs)
    if xlog:
        xlo, xhi = xlo / 1.3, xhi * 1.3
    X = Axis(xlo, xhi, xlog, left, left + pw)
    Y = Axis(ylo, yhi, ylog, top + ph, top)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" id="{pid}" '
         f'data-series="{len(series)}" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
         f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
         f'<text x="{left}" y="22" font-size="15" font-weight="bold">{escape(_fit(title, (width - left) * 11 / 15 / 1.1))}</text>']
    if subtitle:
        o.append(f'<text class="subtitle" x="{left}" y="42" font-size="12" fill="#444">'
                 f'{escape(_fit(subtitle, (width - left) * 11 / 12))}</text>')
    # grid and ticks
    if xlog and xbytes:
        d0, d1 = math.ceil(math.log2(xlo)), math.floor(math.log2(xhi))
        xt = [2 ** e for e in range(d0, d1 + 1)]
    else:
        xt = sorted(set(xs))  # counts (GPUs): the values there are, not round decades
    xlab = (lambda v: human_bytes(v)) if xbytes else (lambda v: f"{v:g}")
    for v in thin_ticks(xt, X, xlab):
        x = X(v)
        o.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
        o.append(f'<text class="xtick" x="{x:.1f}" y="{top + ph + 16}" font-size="11" '
                 f'text-anchor="middle">{xlab(v)}</text>')
    if ylog:
        yt = [10 ** e for e in range(round(math.log10(ylo)), round(math.log10(yhi)) + 1)]
    else:
        yt = [ylo + i * (yhi - ylo) / 5 for i in range(6)]
    for v in yt:
        y = Y(v)
        o.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_fmt_gbs(v)}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{left + pw / 2:.0f}" y="{top + ph + 36}" font-size="12" text-anchor="middle">{escape(xlabel)}</text>')
    o.append(f'<text transform="translate(16,{top + ph / 2:.0f}) rotate(-90)" font-size="12" '
             f'text-anchor="middle">{escape(ylabel)}</text>')
    # the marker key, one line above the legend
    kx = left
    for kind, text in kinds:
        o.append(_marker(kind, kx + 6, legend_top - 14, "#555"))
        o.append(f'<text x="{kx + 14}" y="{legend_top - 10}" font-size="10" fill="#555">{text}</text>')
        kx += 14 + _text_w(text, 10) + 18
    # series
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        p = sorted((x, y) for x, y in s["points"] if x > 0 and (y > 0 or not ylog))
        kind = "measured" if s.get("measured") else (s.get("confidence") or "low")
        if kind not in ("measured", "high", "medium"):
            kind = "low"
        # past the palette, colours repeat: the dash pattern tells those lines apart
        dash = "" if s.get("measured") else \
            f' stroke-dasharray="{DASHES[(i // len(PALETTE)) % len(DASHES)]}"'
        if p:
            band = BAND.get(kind) if ylog else None
            if band and len(p) > 1:
                up = " ".join(f"{X(x):.1f},{Y(min(y * band, yhi)):.1f}" for x, y in p)
                dn = " ".join(f"{X(x):.1f},{Y(max(y / band, ylo)):.1f}" for x, y in reversed(p))
                o.append(f'<polygon class="band" points="{up} {dn}" fill="{color}" opacity="0.08"/>')
            d = "M" + " L".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in p)
            o.append(f'<path class="series" d="{d}" fill="none" stroke="{color}" '
                     f'stroke-width="{2.2 if s.get("measured") else 1.6}"{dash}>'
                     f'<title>{escape(s["label"])}</title></path>')
            o.extend(_marker(kind, X(x), Y(y), color) for x, y in p)
        # legend: column-major, so neighbouring colours read down a column
        lx = left + (i // rows) * col_w
        ly = legend_top + (i % rows) * 17
        o.append(f'<line x1="{lx:.1f}" y1="{ly + 5}" x2="{lx + 26:.1f}" y2="{ly + 5}" stroke="{color}" '
                 f'stroke-width="2"{dash}/>')
        o.append(_marker(kind, lx + 13, ly + 5, color))
        o.append(f'<text class="legend" x="{lx + 32:.1f}" y="{ly + 9}" font-size="11">'
                 f'<title>{escape(s["label"])}</title>{escape(_fit(s["label"], col_w - 40))}</text>')
    o.append("</svg>")
    return "\n".join(o)
