#!/usr/bin/env python3
"""bench/host_vs_mpi_report.py on logs written here with known times: the speedups are
medians over rounds of per-round ratios, broadcast compares in-place times, %roof comes
from the host log's per-size block, every target gets the right verdict, and --plot
writes one PNG per timing method and rank count."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "host_vs_mpi_report.py")
M16, M64 = 16 << 20, 64 << 20


def row(size, oop, inplace):
    return (f"{size:>12} {size // 4:>13} {'float':>9} {'sum':>7} {-1:>7} {oop:>8.2f} {1.0:>7.2f} "
            f"{1.0:>7.2f} {0:>6} {inplace:>8.2f} {1.0:>7.2f} {1.0:>7.2f} {0:>6}\n")


def log(path, rows, roofs=None, tail=()):
    """A host or raw-MPI log: the table's rows, the per-size %roof block, then tail (the
    comment lines a host run prints after its table, such as its floors)."""
    with open(path, "w") as f:
        f.write("# nccl-tests style table\n")
        for size, oop, inplace in rows:
            f.write(row(size, oop, inplace))
        if roofs:
            f.write("# unilink per size [host]: size, algorithm (out-of-place), %roof (...)\n")
            for size, pct in roofs.items():
                f.write(f"#   {size:>10}  direct                    {pct}\n")
        f.writelines(line + "\n" for line in tail)


def report(out):
    """The report on 2 rounds of logs in out: (exit code, what it printed)."""
    p = subprocess.run([sys.executable, REPORT, out, "2"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    return p.returncode, p.stdout


def floor_checks():
    """The 8 B target missed, with the host logs' exchange floors (760 and 700 ns: median
    730): host 0.8 and 0.9 us against Open MPI's 1.0 (0.85x); 0.7 x Open MPI = 700 ns in
    b2b, 0.7 x 1.2 = 840 ns in sync (Open MPI at 1.2 us there)."""
    out = tempfile.mkdtemp(prefix="hvm-floor-")
    for m, ompi in (("b2b", 1.0), ("sync", 1.2)):
        for r, t in ((1, 0.8), (2, 0.9)):
            tag = f"{m}-allreduce-np2-small-r{r}"
            floor = (f"# 2-rank exchange floor, flags only: {700 + 60 * (r % 2)} ns a call "
                     "(both store a line, both wait for the other's; ...)")
            for name, us in (("uni-malloc", t), ("uni-ul", t), ("ompi", ompi), ("mpich", 1.2)):
                log(f"{out}/{name}-{tag}.log", [(8, us, us)],
                    tail=[floor] if name == "uni-malloc" else ())
    rc, text = report(out)
    return [
        ("floor case: exit code 0", rc == 0),
        ("floor case: b2b miss, the goal below the floor",
         "b2b allreduce np2 8: host time = 0.85 x Open MPI's (0.7 x Open MPI = 700 ns; "
         "exchange floor 730 ns, above the goal: no implementation meets it here)" in text),
        ("floor case: sync miss, the floor below the goal",
         "sync allreduce np2 8: host time = 0.71 x Open MPI's (0.7 x Open MPI = 840 ns; "
         "exchange floor 730 ns)" in text),
        ("floor case: the floor's median printed",
         "2-rank exchange floor, flags only (the host runs' own measurement): 730 ns median"
         in text),
    ]


def piece_checks():
    """The roof target missed with malloc buffers at np 2, with the logs' piece exchange
    rates: allreduce 64 MiB crosses 64 MiB a rank, at 16 GB/s at least 4194.304 us; the
    host took 5242.88 us (1.25 times that) at 40% of the roof, so copies at that rate
    reach 50.0% at most, below the 60% goal. Round 1 printed 8.0 before the sweep and
    16.0 after it (the larger is used: 8.0 would give 25%), round 2 only 16.0 before. ul
    buffers at 65% miss too, with no such note (they are not copied)."""
    out = tempfile.mkdtemp(prefix="hvm-piece-")
    for r in (1, 2):
        tag = f"b2b-allreduce-np2-large-r{r}"
        pieces = [f"# 2-rank piece exchange through shared memory: {8.0 * r:.1f} GB/s each "
                  "way (2 threads ...)"]
        if r == 1:
            pieces.append("# 2-rank piece exchange again after the sweep: 16.0 GB/s each way; "
                          "the larger of the two: 16.0")
        log(f"{out}/uni-malloc-{tag}.log", [(M64, 5242.88, 5242.88)], {M64: 40.0}, pieces)
        log(f"{out}/uni-ul-{tag}.log", [(M64, 3000.0, 3000.0)], {M64: 65.0})
        for name, us in (("ompi", 20000.0), ("mpich", 20000.0)):
            log(f"{out}/{name}-{tag}.log", [(M64, us, us)])
    rc, text = report(out)
    return [
        ("piece case: exit code 0", rc == 0),
        ("piece case: malloc miss, the goal above what the piece rate allows",
         "b2b allreduce np2 64M: malloc buffers 40.0% of roof (at the piece exchange's rate: "
         "50.0%, below the goal: copies through shared memory do not meet it here)" in text),
        ("piece case: ul miss without a note",
         "b2b allreduce np2 64M: ul buffers 65.0% of roof\n" in text),
        ("piece case: the median rate printed (16.0 and 16.0)",
         "2-rank piece exchange through shared memory (the host runs' own measurement): "
         "16.0 GB/s each way, median" in text),
    ]


def main():
    out = tempfile.mkdtemp(prefix="hvm-report-")
    # allreduce np2, b2b, 2 rounds. 8 B: Open MPI 1.0 us; malloc 0.5 then 0.9 us: ratios
    # 2.0 and 1.11 -> median 1.56x, host time 0.64 of Open MPI's (target 3 met).
    # 16M: ratios 2.0 and 4.0 -> 3.00x (target 2 met, exactly at the goal); 64M: 2.0 and
    # 2.5 -> 2.25x (missed). MPICH is twice Open MPI's time everywhere.
    host = {1: {8: 0.5, M16: 1000.0, M64: 4000.0}, 2: {8: 0.9, M16: 500.0, M64: 3200.0}}
    ompi = {8: 1.0, M16: 2000.0, M64: 8000.0}
    for r in (1, 2):
        for part, sizes in (("small", [8]), ("large", [M16, M64])):
            tag = f"b2b-allreduce-np2-{part}-r{r}"
            roofs = {M64: 55.0 if r == 1 else 65.0} if part == "large" else None
            log(f"{out}/uni-malloc-{tag}.log", [(s, host[r][s], 99.0) for s in sizes], roofs)
            log(f"{out}/uni-ul-{tag}.log", [(s, host[r][s] / 2, 99.0) for s in sizes],
                {M64: 80.0} if part == "large" else None)
            log(f"{out}/ompi-{tag}.log", [(s, ompi[s], 0.0) for s in sizes])
            log(f"{out}/mpich-{tag}.log", [(s, 2 * ompi[s], 0.0) for s in sizes])
            # broadcast: in-place column 1/4 of the peers' (out-of-place column ignored)
            btag = f"b2b-broadcast-np2-{part}-r{r}"
            for name, t in (("uni-malloc", 1.0), ("uni-ul", 1.0), ("ompi", 4.0), ("mpich", 4.0)):
                log(f"{out}/{name}-{btag}.log", [(s, 1000.0, t * s / 1e6 + t) for s in sizes])
    p = subprocess.run([sys.executable, REPORT, out, "2", "--plot", f"{out}/plot"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    text = p.stdout
    checks = [
        ("exit code 0", p.returncode == 0),
        # allreduce rows: size, malloc, ul, OMPI, MPICH, OMPI/mal, MPICH/mal, OMPI/ul
        ("allreduce 8 B speedup median 1.56x", any(
            l.split()[:1] == ["8"] and "1.56x" in l and "3.11x" in l for l in text.splitlines())),
        ("allreduce 16M exactly 3.00x", any(
            l.split()[:1] == ["16M"] and l.split()[5] == "3.00x" for l in text.splitlines())),
        ("allreduce 64M 2.25x, %roof medians 60.0 and 80.0", any(
            l.split()[:1] == ["64M"] and l.split()[5] == "2.25x" and "60.0%" in l and "80.0%" in l
            for l in text.splitlines())),
        ("broadcast compared in place: 4.00x", any(
            l.split()[:1] == ["16M"] and l.split()[5] == "4.00x" for l in
            text.split("## broadcast")[1].splitlines()) if "## broadcast" in text else False),
        ("target 1 met", "MET  every collective" in text),
        ("target 2 missed at 64M only", "MISS allreduce and reduce_scatter" in text and
         "b2b allreduce np2 64M: 2.25x Open MPI" in text and "16M: 3.00x" not in text),
        ("target 3 met", "MET  allreduce np2 8 B" in text),
        ("target 4 met (ul 80 >= 70, malloc 60 >= 60)", "MET  >= 64 MiB" in text),
    ]
    png = f"{out}/plot-b2b-np2.png"
    try:
        sig = open(png, "rb").read(8)
    except OSError:
        sig = b""
    checks.append((f"{png} is a PNG", sig == b"\x89PNG\r\n\x1a\n"))
    checks.append(("plot path printed", f"plot: {png}" in text))
    checks += floor_checks()
    checks += piece_checks()
    bad = [name for name, ok in checks if not ok]
    for name in bad:
        print(f"FAIL: {name}")
    print(f"{len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
