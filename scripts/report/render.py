"""The report as one self-contained HTML page (inline SVG, inline CSS and JS) and as
Markdown with the same tables. Numbers are printed as the tools printed them."""
from html import escape

from svg import human_bytes, line_plot

CSS = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:13px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f2f2f2}
td.l,th.l{text-align:left}pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:12px}
.conf-low{color:#b00}.conf-medium{color:#a60}.conf-high{color:#070}.bad{color:#b00}
.note{color:#555;font-size:13px}svg.plot{display:block;margin:.5em 0}"""

# Sets data-plots on <body> once every plot has drawn at least one series,
# data-resources to the number of resources the page fetched (must be 0) and
# data-overflow to the number of plot texts (legend, ticks, titles) drawn outside their plot.
JS = """window.addEventListener('load',function(){var p=document.querySelectorAll('svg.plot');
var ok=0,over=0;p.forEach(function(s){var n=+s.getAttribute('data-series');
var d=s.querySelectorAll('path.series').length;var b=s.getBBox();
if(d>=1&&d>=Math.min(n,1)&&b.width>0)ok++;var r=s.getBoundingClientRect();
s.querySelectorAll('text').forEach(function(t){var q=t.getBoundingClientRect();
if(q.left<r.left-1||q.right>r.right+1||q.top<r.top-1||q.bottom>r.bottom+1)over++;});});
var r=(performance.getEntriesByType('resource')||[]).length;
document.body.setAttribute('data-resources',String(r));
document.body.setAttribute('data-overflow',String(over));
document.body.setAttribute('data-plots',ok+'/'+p.length);
document.body.setAttribute('data-rendered',ok===p.length&&p.length>0?'yes':'no');});"""


def _measured_series(data, coll):
    return [dict(label=m["label"], measured=True,
                 points=[(r["size"], r["busbw"]) for r in m["rows"]])
            for m in data["measured"] if m["collective"] == coll and m["rows"]]


def _modeled_series(data, coll):
    return [dict(label=f"{m['label']} [{m['confidence']}]", measured=False,
                 confidence=m["confidence"], points=[(r["size"], r["busbw"]) for r in m["rows"]])
            for m in data["modeled"] if m["collective"] == coll and m["rows"]]


def _where(data):
    """The machine and date a plot was made on, for its title."""
    m = data["machine"]
    gpus = f", {len(m['gpus'])} GPU(s)" if m.get("gpus") else ", no GPU"
    return f"{m['host']} ({m['cpu'] or 'CPU'}, {m['cores']} cores{gpus}), {data['date']}"


def plots(data):
    out = []
    colls = []
    for m in data["measured"] + data["modeled"]:
        if m["collective"] not in colls:
            colls.append(m["collective"])
    for coll in colls:
        s = _measured_series(data, coll) + _modeled_series(data, coll)
        out.append(("plot-" + coll, line_plot(
            "plot-" + coll, f"{coll}: busbw vs size, measured here and modeled "
            f"({data['modeled_ranks']} GPUs)", s, "message size (nccl-tests size, bytes)",
            "busbw (GB/s, 1 GB = 1e9 B)", subtitle=_where(data))))
    tr = data["train"]["cells"]
    # the preferred model (70B) unless fewer than two of its GPU counts could be estimated
    order = [data.get("plot_model")] + [c["model"] for c in tr]
    model = next((m for m in order if len({c["gpus"] for c in tr
                                            if c.get("model") == m and "eff_pct" in c}) > 1),
                 data.get("plot_model"))
    series = {}
    for c in tr:
        if c.get("model") == model and "eff_pct" in c:
            series.setdefault(c["label"], dict(label=f"{c['label']} [{c['confidence']}]",
                                               confidence=c["confidence"], points=[]))
            series[c["label"]]["points"].append((c["gpus"], c["eff_pct"]))
    if series and len({g for s in series.values() for g, _ in s["points"]}) > 1:
        out.append(("plot-train", line_plot(
            "plot-train", f"{model}: modeled scaling efficiency vs GPU count",
            list(series.values()), "GPUs", "scaling efficiency (%) = compute / step",
            ylog=False, xbytes=False, ylim=(0, 100), subtitle=_where(data))))
    return out


def _measured_rows(data):
    rows = []
    for m in data["measured"]:
        if not m["rows"]:
            rows.append([m["collective"], m["label"], "-", "-", "-", "-",
                         "failed: " + m.get("error", "")])
            continue
        for r in m["rows"]:
            rows.append([m["collective"], m["label"], str(r["size"]), f"{r['time_us']:.2f}",
                         f"{r['algbw']:.2f}", f"{r['busbw']:.2f}", str(r.get("wrong", ""))])
    return ["collective", "measured (this machine)", "size (B)", "time (us)",
            "algbw (GB/s)", "busbw (GB/s)", "#wrong"], rows


def _modeled_rows(data, sizes):
    head = ["collective", "modeled system", "confidence"] + [human_bytes(s) for s in sizes]
    rows = []
    for m in data["modeled"]:
        by = {r["size"]: r for r in m["rows"]}
        rows.append([m["collective"], m["label"], m["confidence"]] +
                    [f"{by[s]['busbw']:.2f}" if s in by else "-" for s in sizes])
    return head, rows


def _train_rows(data):
    head = ["model", "GPUs", "TP x PP x DP", "interconnect", "confidence", "step (s)", "compute (s)",
            "grad sync (s)", "exposed comm (s)", "comm share (%)", "scaling eff (%)",
            "algorithm", "busbw (GB/s)"]
    rows = []
    for c in data["train"]["cells"]:
        if "error" in c:
            rows.append([c["model"], str(c["gpus"]), "", "failed", "", c["error"][:200]] + [""] * 7)
            continue
        tpdp = f"{c.get('tp', 1)} x {c.get('pp', 1)} x {c.get('dp') or '?'}"
        rows.append([c["model"], str(c["gpus"]), tpdp, c["label"], c["confidence"],
                     f"{c['step_s']:.4f}", f"{c['compute_s']:.3f}", f"{c['sync_s']:.4f}",
                     f"{c['exposed_s']:.4f}", f"{c['comm_share_pct']:.1f}",
                     f"{c['eff_pct']:.2f}", c["algorithm"], f"{c['busbw']:.1f}"])
    return head, rows


def _html_table(head, rows, left=2):
    o = ["<table><tr>" + "".join(f'<th{" class=l" if i < left else ""}>{escape(h)}</th>'
                                 for i, h in enumerate(head)) + "</tr>"]
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            cls = ' class="l"' if i < left else ""
            if v in ("high", "medium", "low"):
                cls = f' class="conf-{v}"'
            cells.append(f"<td{cls}>{escape(str(v))}</td>")
        o.append("<tr>" + "".join(cells) + "</tr>")
    o.append("</table>")
    return "\n".join(o)


def _md_table(head, rows):
    o = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        o.append("| " + " | ".join(str(v).replace("|", "\\|") for v in r) + " |")
    return "\n".join(o)


def _sections(data):
    """[(title, intro, [(kind, content)])] shared by both renderers; kind: table, pre, list."""
    mach = data["machine"]
    msizes = sorted({r["size"] for m in data["modeled"] for r in m["rows"]})
    # about seven sizes spread over the sweep, always the smallest and the largest
    n = len(msizes)
    show = sorted({msizes[round(i * (n - 1) / 6)] for i in range(7)}) if n else []
    cov = [[c["family"], ", ".join(c["presets"]) or "MISSING", c["note"]] for c in data["coverage"]]
    t = data["train"]
    assum = [f"{k} = {v}" for k, v in t["settings"].items()] + \
        [f"ZeRO stage per model: {', '.join(f'{k}: {v}' for k, v in t['zero'].items())} "
         "(" + ("tensor/pipeline parallel as the TP x PP x DP column says; GPU memory 80 GB, "
                "setups that do not fit are refused by the estimator" if t["tp_supported"] else "data parallel only"
                                  "; the estimator has no tensor/pipeline parallelism yet, "
                                  "and does not check that a replica fits in GPU memory") + ")",
         "compute held constant across interconnects (H100-class bf16 peak x MFU), so every "
         "difference in a row is the interconnect's",
         "comm share = exposed communication / step; scaling efficiency = compute / step "
         "(as unilink-model train prints it)",
         "a preset with fewer GPUs than asked is grown over its NICs (docs/model.md)"]
    secs = [
        ("Machine", "", [("list", [f"host {mach['host']}: {mach['cpu']}, {mach['cores']} cores, "
                                   f"{mach['memory']}", f"OS {mach['os']}",
                                   "GPUs: " + (", ".join(mach["gpus"]) or "none found"),
                                   "backends: " + ", ".join(f"{k} {v}" for k, v in
                                                            mach["backends"].items())])]),
        ("1. Measured on this machine",
         "unilink-bench, nccl-tests out-of-place columns. The host backend moves data through "
         "this machine's memory: it is a baseline for the software, not an interconnect "
         "alternative to NVLink. The mpi row is unilink's mpi backend over Open MPI's native "
         "collectives under mpirun; the raw MPI row is the same collective called straight "
         "on MPI (raw_mpi_bench, no unilink) with the same launcher, sizes and iterations.",
         [("table", _measured_rows(data))]),
        (f"2. Modeled: one {data['modeled_ranks']}-GPU node per interconnect",
         "unilink-model collective, the model's own algorithm choice. busbw in GB/s at "
         "selected sizes (all sizes in the plots and the JSON). Confidence is that of the "
         "catalog figures behind the scale-up link (unilink-model links).",
         [("table", _modeled_rows(data, show)),
          ("table", (["interconnect family", "presets", "note"], cov))]),
        ("3. Training step per interconnect", "unilink-model train. Assumptions:",
         [("list", assum), ("table", _train_rows(data))]),
        ("4. The seed's claims (docs/nvlink-claims.md) and what the tools say now",
         "Every command of the claims page rerun; 'matches' says whether every line the page "
         "shows is still printed.", [("claims", data["claims"])]),
    ]
    return secs


def html(data):
    title = f"unilink: how much does the interconnect matter? {data['machine']['host']}, {data['date']}"
    o = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         f"<title>{escape(title)}</title><style>{CSS}</style><script>{JS}</script></head><body>",
         f"<h1>{escape(title)}</h1>",
         f'<p class="note">Generated by scripts/compare.sh; raw outputs in {escape(data["raw_dir"])}; '
         'measured lines solid, modeled dashed; marker = confidence (filled circle high, open '
         'circle medium, cross low).</p>']
    for pid, svg_text in plots(data):
        o.append(svg_text)
    for title_, intro, parts in _sections(data):
        o.append(f"<h2>{escape(title_)}</h2>")
        if intro:
            o.append(f'<p class="note">{escape(intro)}</p>')
        for kind, content in parts:
            if kind == "table":
                o.append(_html_table(*content))
            elif kind == "list":
                o.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in content) + "</ul>")
            elif kind == "claims":
                for c in content:
                    o.append(f"<h3>{escape(c['claim'])}</h3>")
                    if c["verdict"]:
                        o.append(f"<p><b>Verdict (docs):</b> {escape(c['verdict'])}</p>")
                    for cmd in c["commands"]:
                        ok = "matches the page" if cmd["matches_doc"] else \
                            '<span class="bad">differs from the page</span>'
                        o.append(f"<p class=note>$ {escape(cmd['command'])} &mdash; {ok}</p>")
                        o.append("<pre>" + escape("\n".join(cmd["output"][:14])) + "</pre>")
    o.append("</body></html>")
    return "\n".join(o)


def markdown(data, plot_files):
    title = f"unilink: how much does the interconnect matter? {data['machine']['host']}, {data['date']}"
    o = [f"# {title}", "",
         f"Generated by scripts/compare.sh; raw outputs in `{data['raw_dir']}`. Plots: "
         "report.html (inline SVG), also as files: " +
         ", ".join(f"[{p}]({p})" for p in plot_files), ""]
    for title_, intro, parts in _sections(data):
        o += [f"## {title_}", ""]
        if intro:
            o += [intro, ""]
        for kind, content in parts:
            if kind == "table":
                o += [_md_table(*content), ""]
            elif kind == "list":
                o += [f"- {x}" for x in content] + [""]
            elif kind == "claims":
                for c in content:
                    o += [f"### {c['claim']}", ""]
                    if c["verdict"]:
                        o += [f"**Verdict (docs):** {c['verdict']}", ""]
                    for cmd in c["commands"]:
                        o += [f"`$ {cmd['command']}`: "
                              f"{'matches the page' if cmd['matches_doc'] else 'DIFFERS from the page'}",
                              "", "```"] + cmd["output"][:14] + ["```", ""]
    return "\n".join(o) + "\n"
