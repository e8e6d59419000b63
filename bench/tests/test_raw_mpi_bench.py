#!/usr/bin/env python3
"""raw_mpi_bench under mpirun prints nccl-tests' table (label bench;mpi).

Every collective, both timing methods: parse_nccl_tests.parse(strict=True) accepts the
output (13-field rows, one gate-able footer), every page of both buffers is resident
before timing (a page never written reads as the kernel's zero page: no traffic), the
sizes are the sweep asked for (blocks of whole 16 bytes, as nccl-tests), the root column
is 0 for rooted collectives and -1 otherwise, every
checked column has #wrong 0 (alltoall's in-place column is N/A), busbw = algbw x nccl-tests'
factor, the footer is the average busbw, and a bad argument exits 2.

Usage: test_raw_mpi_bench.py --bench BIN -- MPIRUN [FLAGS..] -np 2
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import parse_nccl_tests  # noqa: E402

FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
          "alltoall": lambda n: (n - 1) / n, "reduce": lambda n: 1.0,
          "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n}
# Collectives whose buffers hold a block a rank: nccl-tests (and unilink-bench) round each
# block down to whole 16 bytes, so both benches print the same sizes.
BLOCKED = ("allgather", "alltoall", "reduce_scatter", "gather", "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def main():
    argv = sys.argv[1:]
    bench = argv[argv.index("--bench") + 1]
    launch = argv[argv.index("--") + 1:]
    nranks = int(launch[launch.index("-np") + 1])
    for coll in FACTOR:
        for extra in ([], ["--sync-per-call"]):
            label = " ".join([coll] + extra)
            p = subprocess.run(launch + [bench, coll, "-b", "8", "-e", "256K", "-f", "8",
                                         "-n", "5", "-w", "1", "-c", "1"] + extra,
                               capture_output=True, text=True, timeout=120)
            check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-400:]}")
            try:
                res = parse_nccl_tests.parse(p.stdout, strict=True)
            except parse_nccl_tests.StrictError as ex:
                check(False, f"{label}: {ex}")
                print(p.stdout)
                continue
            # every page of both buffers written before timing: none reads as the zero page
            res_line = [ln for ln in p.stdout.splitlines() if ln.startswith("# Buffers:")]
            m = re.search(r"(-?\d+) of (\d+) pages resident", res_line[0]) if res_line else None
            check(m is not None and int(m.group(1)) == int(m.group(2)) > 0,
                  f"{label}: buffers line {res_line}")
            rows = res["rows"]
            check(len(rows) == 6, f"{label}: {len(rows)} rows, want 6 (8 .. 256K by 8)")
            check(res["columns"][:5] == ["size", "count", "type", "redop", "root"],
                  f"{label}: columns {res['columns']}")
            bws = []
            for r in rows:
                for side in ("out_of_place", "in_place"):
                    s = r[side]
                    if coll == "alltoall" and side == "in_place":
                        check(s["wrong"] is None and s["time"] == 0, f"{label}: in-place {s}")
                        continue
                    check(s["wrong"] == 0, f"{label}: {r['size']} {side} #wrong {s['wrong']}")
                    check(s["time"] > 0, f"{label}: {r['size']} {side} time {s['time']}")
                    want = s["algbw"] * FACTOR[coll](nranks)
                    check(abs(s["busbw"] - want) <= 0.011, f"{label}: busbw {s} want {want}")
                    bws.append(s["busbw"])
            per = nranks if coll in BLOCKED else 1
            asked = [8 * 8 ** i for i in range(6)]
            want_sizes = [(b // 4 // nranks & ~3) * 4 * nranks if coll in BLOCKED else b
                          for b in asked]
            check([r["size"] for r in rows] == want_sizes,
                  f"{label}: sizes {[r['size'] for r in rows]}, want {want_sizes}")
            for r in rows:
                check(r["count"] * 4 * per == r["size"], f"{label}: count {r['count']}")
                check(r["root"] == (0 if coll in ROOTED else -1), f"{label}: root {r['root']}")
            check(res["footer"].get("out_of_bounds") == 0 and res["footer"]["out_of_bounds_ok"],
                  f"{label}: footer {res['footer']}")
            avg = res["footer"].get("avg_busbw")
            check(avg is not None and bws and abs(avg - sum(bws) / len(bws)) <= 0.01,
                  f"{label}: avg busbw {avg} vs rows {bws}")
            check(len(res["gate_lines"]) == 1, f"{label}: gate lines {res['gate_lines']}")
    p = subprocess.run(launch + [bench, "allreduce", "-f", "1"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 2 and "usage" in p.stderr, f"-f 1: exit {p.returncode}")
    print("raw_mpi_bench: %s" % ("FAIL %d" % len(failures) if failures else "PASS"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
