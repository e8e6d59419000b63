#!/usr/bin/env python3
"""unilink's comparison report: measured here, modeled per interconnect, training steps,
the claims page rerun. Writes OUT/report.html (self-contained), OUT/report.md, the plots
as SVG files, OUT/report.json with --json, and every tool's raw output under OUT/raw/.

  unilink_report.py --build build [--out build/compare] [--topology FILE] [--model 70B]
                    [--gpus 64] [--interconnects a,b,c] [--json] [--quick]
"""
import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collect  # noqa: E402
import render  # noqa: E402
from tools import ToolError, Tools  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_model(text):
    """'70B', '405b', '7e9' -> (label, params)"""
    t = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([bBmMkK]?)", t)
    if m:
        v = float(m.group(1)) * {"b": 1e9, "m": 1e6, "k": 1e3, "": 1}[m.group(2).lower()]
        return (t.upper() if m.group(2) else f"{v:g}"), v
    try:
        return t, float(t)
    except ValueError:
        raise SystemExit(f"--model {text!r}: use e.g. 70B or 7e10")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default=None, help="default: BUILD/compare")
    ap.add_argument("--topology", help="your topology file (docs/model.md format), added to every section")
    ap.add_argument("--model", action="append", help="model size(s), e.g. 70B (default 7B,70B,405B)")
    ap.add_argument("--gpus", action="append", help="GPU count(s) for the training table (default 8,64,1024)")
    ap.add_argument("--interconnects", help="comma-separated presets (default: every preset)")
    ap.add_argument("--ranks", type=int, default=8, help="GPUs of the modeled node (default 8)")
    ap.add_argument("--json", action="store_true", help="also write report.json (everything)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and one collective (tests)")
    ap.add_argument("--no-measure", action="store_true", help="skip the measurements")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out or os.path.join(a.build, "compare"))
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    for old in os.listdir(raw):  # a previous run's outputs must not pass for this run's
        if old.endswith(".txt") or ".json" in old:
            os.remove(os.path.join(raw, old))
    t0 = time.time()

    def keep(name, cmd, text):
        with open(os.path.join(raw, name + ".txt"), "w") as f:
            f.write("$ " + " ".join(cmd) + "\n" + text)

    tools = Tools(a.build, log=keep)
    models = dict(parse_model(x) for m in (a.model or []) for x in m.split(",")) or collect.MODELS
    try:
        gpus = [int(x) for g in (a.gpus or []) for x in g.split(",")] or collect.GPUS
    except ValueError:
        ap.error("--gpus takes integers, e.g. 64 or 8,64")
    if a.topology and not os.path.exists(a.topology):
        ap.error(f"--topology {a.topology}: no such file")
    wanted = [x for x in (a.interconnects or "").split(",") if x]
    try:
        links = tools.links()
        topos = tools.topologies()
        systems = collect.pick_topologies(tools, links, topos, wanted, a.topology)
        backends = tools.backends()
        mach = collect.machine_info(backends)
        data = dict(date=collect.now_utc(), machine=mach, raw_dir=raw, modeled_ranks=a.ranks,
                    options=dict(topology=a.topology, models=list(models), gpus=gpus,
                                 interconnects=wanted, quick=a.quick),
                    links=links, topologies=topos, coverage=collect.coverage(links, topos))
        data["measured"] = [] if a.no_measure else \
            collect.measure(tools, raw, a.quick, len(mach["gpus"]))
        data["modeled"] = collect.model_sweeps(tools, systems, a.ranks, a.quick)
        data["train"] = collect.train_table(tools, systems, models, gpus)
        data["plot_model"] = "70B" if "70B" in models else next(iter(models))
        data["claims"] = collect.claims(tools, os.path.join(REPO, "docs", "nvlink-claims.md"))
    except ToolError as e:
        print(f"unilink_report: {e}", file=sys.stderr)
        return 2
    plot_files = []
    for pid, svg_text in render.plots(data):
        with open(os.path.join(out, pid + ".svg"), "w") as f:
            f.write(svg_text)
        plot_files.append(pid + ".svg")
    with open(os.path.join(out, "report.html"), "w") as f:
        f.write(render.html(data))
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(render.markdown(data, plot_files))
    if a.json:
        with open(os.path.join(out, "report.json"), "w") as f:
            json.dump(data, f, indent=1)
    failed = [m["label"] + " " + m["collective"] for m in data["measured"] if not m["rows"]]
    for m in data["measured"]:
        if m["rows"] and m["collective"] == "allreduce":
            big = max(m["rows"], key=lambda r: r["size"])
            print(f"measured  {m['label']:<40} allreduce {big['size']:>10} B busbw {big['busbw']:8.2f} GB/s")
    for m in data["modeled"]:
        if m["rows"] and m["collective"] == "allreduce":
            big = max(m["rows"], key=lambda r: r["size"])
            print(f"modeled   {m['label']:<40} allreduce {big['size']:>10} B busbw {big['busbw']:8.2f} GB/s  [{m['confidence']}]")
    for f_ in failed:
        print(f"failed    {f_} (see {raw})", file=sys.stderr)
    slow = sorted(tools.times, reverse=True)[:3]
    print(f"{len(tools.times)} commands, {sum(t for t, _ in tools.times):.0f} s; slowest: " +
          ", ".join(f"{n} {t:.1f} s" for t, n in slow))
    print(f"Report: {os.path.join(out, 'report.html')} (and report.md"
          f"{', report.json' if a.json else ''}) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
