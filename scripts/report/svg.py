"""Line plots as inline SVG (no external resource, no plotting package).

Measured series are solid with square markers; modeled ones dashed, their marker says
the confidence of the catalog figures behind them: filled circle high, open circle
medium, cross low (and a faint band of +-factor for low/medium, where the sources say
the figure is unverified).
"""
import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939", "#8c6d31",
           "#843c39", "#7b4173", "#3182bd", "#e6550d"]
# Half-width of the shaded band (multiplicative) by confidence: how far off such
# a figure was found to be in validation (docs/model.md) or could be, unverified.
BAND = {"medium": 1.25, "low": 1.6}


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


def line_plot(pid, title, series, xlabel, ylabel, xlog=True, ylog=True, xbytes=True,
              ylim=None, width=980, height=560):
    """series: [{label, points: [(x, y)], measured: bool, confidence: str}] -> SVG text."""
    left, right, top, bottom = 70, 330, 40, 60
    pw, ph = width - left - right, height - top - bottom
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
         f'<text x="{left}" y="22" font-size="15" font-weight="bold">{escape(title)}</text>']
    # grid and ticks
    if xlog:
        d0, d1 = math.ceil(math.log2(xlo)), math.floor(math.log2(xhi))
        step = 4 if d1 - d0 > 24 else (2 if d1 - d0 > 12 else 1)
        xt = [2 ** e for e in range(d0, d1 + 1) if e % step == 0] if xbytes else \
            [10 ** e for e in range(math.ceil(math.log10(xlo)), math.floor(math.log10(xhi)) + 1)]
        if not xbytes:
            xt = sorted(set(xt + [x for x in xs]))
    else:
        xt = sorted(set(xs))
    for v in xt:
        x = X(v)
        o.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
        lab = human_bytes(v) if xbytes else f"{v:g}"
        o.append(f'<text x="{x:.1f}" y="{top + ph + 16}" font-size="11" text-anchor="middle">{lab}</text>')
    if ylog:
        yt = [10 ** e for e in range(round(math.log10(ylo)), round(math.log10(yhi)) + 1)]
    else:
        yt = [ylo + i * (yhi - ylo) / 5 for i in range(6)]
    for v in yt:
        y = Y(v)
        o.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_fmt_gbs(v)}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{left + pw / 2:.0f}" y="{height - 18}" font-size="12" text-anchor="middle">{escape(xlabel)}</text>')
    o.append(f'<text transform="translate(16,{top + ph / 2:.0f}) rotate(-90)" font-size="12" '
             f'text-anchor="middle">{escape(ylabel)}</text>')
    # series
    ly = top + 4
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        p = sorted((x, y) for x, y in s["points"] if x > 0 and (y > 0 or not ylog))
        kind = "measured" if s.get("measured") else (s.get("confidence") or "low")
        if kind not in ("measured", "high", "medium"):
            kind = "low"
        dash = "" if s.get("measured") else ' stroke-dasharray="7,4"'
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
        # legend
        lx = left + pw + 14
        o.append(f'<line x1="{lx}" y1="{ly + 5}" x2="{lx + 26}" y2="{ly + 5}" stroke="{color}" '
                 f'stroke-width="2"{dash}/>')
        o.append(_marker(kind, lx + 13, ly + 5, color))
        o.append(f'<text x="{lx + 32}" y="{ly + 9}" font-size="11">{escape(s["label"])}</text>')
        ly += 17
    ly += 8
    for kind, text in (("measured", "measured here (solid)"), ("high", "modeled, high confidence"),
                       ("medium", "modeled, medium (band x/÷1.25)"),
                       ("low", "modeled, low (band x/÷1.6)")):
        if ly > height - 10:
            break
        o.append(_marker(kind, left + pw + 27, ly + 5, "#555"))
        o.append(f'<text x="{left + pw + 46}" y="{ly + 9}" font-size="10" fill="#555">{text}</text>')
        ly += 15
    o.append("</svg>")
    return "\n".join(o)
