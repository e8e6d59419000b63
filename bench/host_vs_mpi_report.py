#!/usr/bin/env python3
"""Tables and target checks for bench/host-vs-mpi.sh: reads its logs (nccl-tests tables from
unilink-bench and raw_mpi_bench) and prints, per timing method, collective and rank count,
the host backend's out-of-place times (in place for broadcast: MPI_Bcast has one buffer)
with malloc and ul_mem_alloc buffers beside raw Open MPI's and raw MPICH's, speedups (raw time / host time, medians over rounds of per-round
ratios) and %roof; then the targets of issue 18 with every point that misses one. With
--plot PREFIX it also draws, per timing method and rank count, the speedups against size
for every collective (gnuplot): PREFIX-<method>-np<N>.png.

    host_vs_mpi_report.py OUT_DIR ROUNDS [--plot PREFIX]"""
import functools
import glob
import math
import os
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^\s+\d+\s+\d+\s")
EXTRA = re.compile(r"^#\s+(\d+)\s+(\S+)\s+(\S+)")


def parse(path, inplace=False):
    """(size -> out-of-place (or in-place) us, size -> %roof) of the first block of a log
    (the host backend, or the raw bench's only block)."""
    times, roof = {}, {}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return times, roof
    extras = False
    for line in lines:
        if line.startswith("# unilink per size"):
            extras = "%roof" in line
            continue
        if ROW.match(line):
            f = line.split()
            try:
                times.setdefault(int(f[0]), float(f[9] if inplace else f[5]))
            except ValueError:
                pass
        elif extras:
            m = EXTRA.match(line)
            if m:
                try:
                    roof.setdefault(int(m.group(1)), float(m.group(3)))
                except ValueError:
                    pass
            elif not line.startswith("#   ") and not line.startswith("# "):
                extras = False
    return times, roof


def human(b):
    for u, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s}{u}"
    return str(b)


def med(v):
    v = [x for x in v if x is not None and not math.isnan(x)]
    return statistics.median(v) if v else float("nan")


def fmt(x, w, p=2, suffix=""):
    return f"{'-':>{w}}" if x is None or math.isnan(x) else f"{x:{w}.{p}f}{suffix}"


# Series of a plot panel: (label, peer key, host key).
SERIES = (("Open MPI / host, malloc", "om", "hm"), ("MPICH / host, malloc", "mp", "hm"),
          ("Open MPI / host, ul_mem_alloc", "om", "hu"), ("MPICH / host, ul_mem_alloc", "mp", "hu"))


def gq(text):
    """text as a gnuplot double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plot(prefix, method, title, np, panels):
    """One PNG: a panel per collective, speedup (raw MPI time / host time) against size,
    log-log, with the 1.0x line. panels: [(collective, {series label: [(size, x)]})].
    Returns the path, or None when gnuplot failed (its message on stderr)."""
    path = f"{prefix}-{method}-np{np}.png"
    rows = (len(panels) + 1) // 2  # two panels a row, each row about 330 pixels high
    lines = [f"set terminal pngcairo size 1400,{330 * rows + 10} font ',10' noenhanced",
             f"set output {gq(path)}",
             f"set multiplot layout {rows},2 title "
             f"{gq(f'unilink host against raw MPI, np={np}, {title}')}",
             "set logscale x 2", "set logscale y", "set format x '%.0b%B'",
             "set xlabel 'bytes'", "set ylabel 'speedup (> 1: unilink faster)'",
             "set key top left", "set grid"]
    for coll, series in panels:
        lines.append(f"set title {gq(coll)}")
        plots = []
        for i, (label, _, _) in enumerate(SERIES):
            pts = series.get(label) or []
            if not pts:
                continue
            block = f"$d{len(lines)}_{i}"
            lines.append(f"{block} << EOD")
            lines += [f"{s} {x:.6g}" for s, x in pts]
            lines.append("EOD")
            plots.append(f"{block} using 1:2 with linespoints title {gq(label)}")
        plots.append("1 with lines dashtype 2 lc rgb 'black' title '1.0x'")
        lines.append("plot " + ", ".join(plots))
    lines.append("unset multiplot")
    p = subprocess.run(["gnuplot"], input="\n".join(lines) + "\n", text=True,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        return None
    return path


def main():
    args = sys.argv[1:]
    prefix = None
    if "--plot" in args:
        i = args.index("--plot")
        prefix = args[i + 1]
        del args[i:i + 2]
    out, rounds = args[0], int(args[1])
    names = [os.path.basename(p)[:-4] for p in glob.glob(f"{out}/*.log")]
    methods = [m for m in ("b2b", "sync") if any(f"-{m}-" in n for n in names)]
    colls, nps = [], []
    for n in sorted(names):
        m = re.match(r"uni-\w+-\w+-(\w+)-np(\d+)-", n)
        if m:
            if m.group(1) not in colls:
                colls.append(m.group(1))
            if int(m.group(2)) not in nps:
                nps.append(int(m.group(2)))
    nps.sort()
    title = {"b2b": "back to back (nccl-tests' method)", "sync": "synchronized per call"}
    # data[(method, coll, np)][size] = list over rounds of dict of times/roofs
    data = {}
    for m in methods:
        for c in colls:
            for np in nps:
                per = []
                for r in range(1, rounds + 1):
                    d = {}
                    for part in ("small", "large"):
                        tag = f"{m}-{c}-np{np}-{part}-r{r}"
                        # MPI_Bcast has one buffer: compare it with our in-place broadcast
                        ip = c == "broadcast"
                        hm, rm = parse(f"{out}/uni-malloc-{tag}.log", ip)
                        pm = piece_rate(f"{out}/uni-malloc-{tag}.log")
                        hu, ru = parse(f"{out}/uni-ul-{tag}.log", ip)
                        om, _ = parse(f"{out}/ompi-{tag}.log", ip)
                        mp, _ = parse(f"{out}/mpich-{tag}.log", ip)
                        for s in set(hm) | set(hu):
                            d[s] = dict(hm=hm.get(s), hu=hu.get(s), om=om.get(s), mp=mp.get(s),
                                        rm=rm.get(s), ru=ru.get(s), pm=pm)
                    per.append(d)
                data[(m, c, np)] = per

    def ratio(per, s, peer, host):
        return med([d[s][peer] / d[s][host] for d in per
                    if s in d and d[s][peer] and d[s][host]])

    def value(per, s, k):
        return med([d[s][k] for d in per if s in d and d[s][k] is not None])

    if prefix:
        for m in methods:
            for np in nps:
                panels = []
                for c in colls:
                    per = data[(m, c, np)]
                    sizes = sorted(set().union(*[d.keys() for d in per])) if per else []
                    series = {}
                    for label, peer, host in SERIES:
                        pts = [(s, ratio(per, s, peer, host)) for s in sizes if s > 0]
                        series[label] = [(s, x) for s, x in pts if not math.isnan(x) and x > 0]
                    panels.append((c, series))
                path = plot(prefix, m, title[m], np, panels)
                print(f"plot: {path}" if path else f"plot {m} np{np}: gnuplot failed")

    misses = {1: [], 2: [], 3: [], 4: []}
    seen = {1: 0, 2: 0, 3: 0, 4: 0}  # points each target was checked on
    for m in methods:
        for c in colls:
            for np in nps:
                per = data[(m, c, np)]
                sizes = sorted(set().union(*[d.keys() for d in per])) if per else []
                if not sizes:
                    continue
                print(f"\n## {c}, np={np}, {title[m]}; medians of {rounds} round(s); "
                      "speedup = time[raw MPI] / time[host]")
                print(f"{'size':>6} {'malloc us':>10} {'ul us':>10} {'OpenMPI us':>11} "
                      f"{'MPICH us':>10} {'OMPI/mal':>9} {'MPICH/mal':>10} {'OMPI/ul':>8} "
                      f"{'roof mal':>9} {'roof ul':>8}")
                for s in (s for s in sizes if s > 0):
                    rom, rmp, rou = (ratio(per, s, "om", "hm"), ratio(per, s, "mp", "hm"),
                                     ratio(per, s, "om", "hu"))
                    pm, pu = value(per, s, "rm"), value(per, s, "ru")
                    print(f"{human(s):>6} {fmt(value(per, s, 'hm'), 10)} "
                          f"{fmt(value(per, s, 'hu'), 10)} {fmt(value(per, s, 'om'), 11)} "
                          f"{fmt(value(per, s, 'mp'), 10)} {fmt(rom, 8, 2, 'x')} "
                          f"{fmt(rmp, 9, 2, 'x')} {fmt(rou, 7, 2, 'x')} "
                          f"{fmt(pm, 8, 1, '%')} {fmt(pu, 7, 1, '%')}")
                    where = f"{m} {c} np{np} {human(s)}"
                    for peer, r in (("Open MPI", rom), ("MPICH", rmp)):
                        if not math.isnan(r):
                            seen[1] += 1
                            if r < 1.0:
                                misses[1].append(f"{where}: {r:.2f}x {peer}")
                    if c in ("allreduce", "reduce_scatter") and s >= 16 << 20 and \
                            not math.isnan(rom):
                        seen[2] += 1
                        if rom < 3.0:
                            misses[2].append(f"{where}: {rom:.2f}x Open MPI")
                    if c == "allreduce" and np == 2 and s == 8 and not math.isnan(rom):
                        seen[3] += 1
                        if 1.0 / rom > 0.7:
                            misses[3].append(f"{where}: host time = {1.0 / rom:.2f} x Open MPI's"
                                             + below_floor(out, value(per, s, "om")))
                    if s >= 64 << 20:
                        for what, p, goal in (("ul", pu, 70), ("malloc", pm, 60)):
                            if not math.isnan(p):
                                seen[4] += 1
                                if p < goal:
                                    note = piece_note(per, s, c, goal) \
                                        if what == "malloc" and np == 2 else ""
                                    misses[4].append(f"{where}: {what} buffers {p:.1f}% of roof"
                                                     + note)
        # thread ranks against raw np=2
        for buf in ("malloc", "ul"):
            per = []
            for r in range(1, rounds + 1):
                d = {}
                for part in ("small", "large"):
                    t, _ = parse(f"{out}/thr-{buf}-{m}-allreduce-{part}-r{r}.log")
                    o, _ = parse(f"{out}/ompi-{m}-allreduce-np2-{part}-r{r}.log")
                    p, _ = parse(f"{out}/mpich-{m}-allreduce-np2-{part}-r{r}.log")
                    for s, v in t.items():
                        d[s] = dict(h=v, om=o.get(s), mp=p.get(s))
                per.append(d)
            sizes = sorted(set().union(*[d.keys() for d in per])) if per else []
            if not sizes:
                continue
            print(f"\n## allreduce, THREAD ranks (2, no mpirun, {buf} buffers) against raw MPI "
                  f"np=2, {title[m]}")
            print(f"{'size':>6} {'host us':>10} {'OpenMPI us':>11} {'MPICH us':>10} "
                  f"{'OMPI/host':>10} {'MPICH/host':>11}")
            for s in sizes:
                print(f"{human(s):>6} {fmt(value(per, s, 'h'), 10)} "
                      f"{fmt(value(per, s, 'om'), 11)} {fmt(value(per, s, 'mp'), 10)} "
                      f"{fmt(ratio(per, s, 'om', 'h'), 9, 2, 'x')} "
                      f"{fmt(ratio(per, s, 'mp', 'h'), 10, 2, 'x')}")
    goals = {1: "every collective, every size, malloc buffers: >= 1.0x raw Open MPI and MPICH",
             2: "allreduce and reduce_scatter, malloc buffers, >= 16 MiB: >= 3x raw Open MPI",
             3: "allreduce np2 8 B, malloc buffers: host time <= 0.7 x Open MPI's",
             4: ">= 64 MiB: >= 70% of the roofline (ul buffers), >= 60% (malloc buffers)"}
    print("\n## Targets (issue 18), on the medians above")
    for k in sorted(goals):
        verdict = "MISS" if misses[k] else ("MET " if seen[k] else "N/A ")
        print(f"{verdict} {goals[k]}" + (f": {len(misses[k])} of {seen[k]} point(s)"
                                          if misses[k] else f" ({seen[k]} point(s))"))
        for line in misses[k]:
            print(f"       {line}")
    rtt = line_floor(out, "rtt")
    if rtt:
        print(f"\nCache-line round trip between CPUs 0 and 1 (the host runs' own measurement): "
              f"{rtt:.0f} ns median (one line each way, in turn)")
    exchange = line_floor(out, "exchange")
    if exchange:
        print(f"2-rank exchange floor, flags only (the host runs' own measurement): "
              f"{exchange:.0f} ns median; no 2-rank 8 B allreduce is faster, in either method")
    pieces = [g for g in map(piece_rate, glob.glob(f"{out}/uni-*.log")) if g]
    if pieces:
        print(f"2-rank piece exchange through shared memory (the host runs' own measurement): "
              f"{statistics.median(pieces):.1f} GB/s each way, median; the rate that bounds "
              f"private buffers copied between 2 ranks")
    print(f"\nraw logs: {out}")


FLOOR_LINES = {
    "rtt": re.compile(r"# Cache-line round trip between CPUs 0 and 1: (\d+) ns"),
    "exchange": re.compile(r"# 2-rank exchange floor, flags only: (\d+) ns a call"),
}


@functools.lru_cache(maxsize=None)  # read the logs once: below_floor asks per missed point
def line_floor(out, which):
    """Median over the host runs' logs of one of their 2-rank floors (FLOOR_LINES: the
    cache-line round trip or the exchange) in ns, or None."""
    got = []
    for path in glob.glob(f"{out}/uni-*.log"):
        for line in open(path, errors="replace"):
            m = FLOOR_LINES[which].match(line)
            if m:
                got.append(float(m.group(1)))
    return statistics.median(got) if got else None


PIECE_LINES = (  # the larger of a log's two measurements where it printed both
    re.compile(r"# 2-rank piece exchange again after the sweep: .* the larger of the two: "
               r"([\d.]+)"),
    re.compile(r"# 2-rank piece exchange through shared memory: ([\d.]+) GB/s each way"))

# Bytes each of 2 ranks receives from the other, per byte of the size column: an allreduce
# rank gets its peer's half of its own slice and the peer's reduced half; a reduce_scatter
# rank its peer's block of its slice; allgather and alltoall ranks half of their output
# (docs/bench.md). Broadcast sends one way: the piece exchange, both
# ways at once, does not bound it.
CROSSING_NP2 = {"allreduce": 1.0, "reduce_scatter": 0.5, "allgather": 0.5, "alltoall": 0.5}


@functools.lru_cache(maxsize=None)
def piece_rate(path):
    """The 2-rank piece exchange rate (GB/s each way) a host log measured, or None."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return None
    for pattern in PIECE_LINES:
        for line in lines:
            m = pattern.match(line)
            if m:
                return float(m.group(1))
    return None


def piece_note(per, s, coll, goal):
    """A note for a malloc point below its roof goal at np 2: the %roof it would reach if
    it took no longer than its bytes crossing between the ranks at the piece exchange
    rate its own log measured (median over rounds); a goal above that no private-buffer
    implementation that copies through shared memory meets in this run."""
    frac = CROSSING_NP2.get(coll)
    if not frac:
        return ""
    best = med([d[s]["rm"] * d[s]["hm"] / (frac * s / (d[s]["pm"] * 1e3)) for d in per
                if s in d and d[s]["rm"] and d[s]["hm"] and d[s]["pm"]])
    if math.isnan(best):
        return ""
    return (f" (at the piece exchange's rate: {best:.1f}%"
            + (", below the goal: copies through shared memory do not meet it here)"
               if best < goal else ")"))


def below_floor(out, ompi_us):
    """A note for the 8 B target: 0.7 x Open MPI's time beside the exchange floor (flags
    only, measured by the host runs); a goal below it no implementation meets in this run."""
    floor = line_floor(out, "exchange")
    if not floor or not ompi_us or math.isnan(ompi_us):
        return ""
    goal = 0.7 * ompi_us * 1000.0
    return (f" (0.7 x Open MPI = {goal:.0f} ns; exchange floor {floor:.0f} ns"
            + (", above the goal: no implementation meets it here)" if floor > goal else ")"))


if __name__ == "__main__":
    main()
