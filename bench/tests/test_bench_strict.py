#!/usr/bin/env python3
"""unilink-bench output as nccl-tests' consumers read it (docs/bench.md "Output format").

Strict table (parse_nccl_tests.parse(strict=True)): every data row exactly 13 fields, at
most one line a bandwidth gate (/Avg bus bandwidth/) matches. Cases: single backend,
side by side (host,sim:dgx-h100), a failing backend in a list, all_reduce_perf, the
NCCL_TESTS_MIN_BW verdict, -J read with the keys nccl-tests' tools/analyze_perf_json.py
uses, alltoallv/allgatherv (and *_perf) on host threads and sim with #wrong 0, a named
backend that cannot run (host,nccl: Test failure) against "all" (skipped), and under
mpirun (np 2 table, np 3 straggler rows, NCCL_TESTS_SPLIT groups, alltoallv/allgatherv
on mpi alone and side by side with host, every rank in each block's "Using devices")
when mpirun and the mpi plugin are there.

Usage: test_bench_strict.py --bench BIN [--workdir DIR] [--no-mpi]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import parse_nccl_tests  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(argv, env=None, timeout=240, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=e, cwd=cwd)
    return p


def strict(label, text):
    try:
        return parse_nccl_tests.parse(text, strict=True)
    except parse_nccl_tests.StrictError as ex:
        check(False, "%s: %s" % (label, ex))
        print(text)
        return parse_nccl_tests.parse(text)


def one_gate(label, res, want_value=None):
    check(len(res["gate_lines"]) == 1, "%s: %d gate-able lines %s" % (label, len(res["gate_lines"]),
                                                                     res["gate_lines"]))
    if want_value is not None and "avg_busbw" in res["footer"]:
        got = res["footer"]["avg_busbw"]
        check(abs(got - want_value) <= 0.01 + 0.02 * want_value,
              "%s: gate value %s, rows say %s" % (label, got, want_value))


def avg_busbw(rows):
    v = [r[s]["busbw"] for r in rows for s in ("out_of_place", "in_place")]
    return sum(v) / len(v) if v else 0.0


def analyze_like(doc, label, nprocs=1):
    """The keys analyze_perf_json.py reads; False when one is missing."""
    cfg = doc.get("config", {})
    check(isinstance(cfg.get("devices"), list) and len(cfg["devices"]) >= nprocs and
          all("hostname" in d and "pid" in d for d in cfg["devices"]),
          "%s: config.devices %s" % (label, cfg.get("devices")))
    check("devices" not in doc, "%s: top-level devices (nccl-tests has config.devices)" % label)
    for k in ("iterations", "aggregated_iterations", "per_iter_skip"):
        check(k in cfg, "%s: config.%s missing" % (label, k))
    res = doc.get("results")
    check(isinstance(res, list) and res, "%s: results empty" % label)
    sizes = [r["size"] for r in res]
    check(len(sizes) == len(set(sizes)), "%s: a size twice in results %s" % (label, sizes))
    for r in res:
        for side in ("out_of_place", "in_place"):
            s = r.get(side)
            check(s is not None and all(k in s for k in ("time", "alg_bw", "bus_bw", "nwrong")),
                  "%s: %s %s" % (label, side, s))
            pi = r.get(side + "_per_iter")
            check(pi is not None, "%s: %s_per_iter missing" % (label, side))
            if not pi:
                continue
            for k in ("skipped_iterations", "min_us", "max_us", "avg_us", "p50_us", "p95_us",
                      "p99_us", "stdev_us", "cv_pct", "times_us"):
                check(k in pi, "%s: %s_per_iter.%s missing" % (label, side, k))
            if nprocs > 1:
                pp = pi.get("per_process_max_times_us")
                check(isinstance(pp, list) and len(pp) == nprocs and
                      all(len(row) == len(pi["times_us"]) for row in pp),
                      "%s: per_process_max_times_us %s" % (label, pp))
    bw = doc.get("average_bus_bandwidth", {})
    check("bandwidth" in bw and "okay" in bw, "%s: average_bus_bandwidth %s" % (label, bw))
    check(doc.get("out_of_bounds", {}).get("okay") in ("true", "false"),
          "%s: out_of_bounds %s" % (label, doc.get("out_of_bounds")))


def ranks_of(device_lines):
    return sorted(int(l.split()[2]) for l in device_lines)


def v_checks(label, p, op, nrows):
    """alltoallv/allgatherv: exit 0, strict table, nrows rows, every checked #wrong 0
    (alltoallv has no in-place side: N/A), one gate line."""
    check(p.returncode == 0, "%s: exit %d %s" % (label, p.returncode, p.stderr[-400:]))
    res = strict(label, p.stdout)
    check(len(res["rows"]) == nrows, "%s: %d rows (want %d)" % (label, len(res["rows"]), nrows))
    for r in res["rows"]:
        check(r["out_of_place"]["wrong"] == 0, "%s: out-of-place #wrong %s at %d" %
              (label, r["out_of_place"]["wrong"], r["size"]))
        want_ip = None if op == "alltoallv" else 0
        check(r["in_place"]["wrong"] == want_ip, "%s: in-place #wrong %s at %d" %
              (label, r["in_place"]["wrong"], r["size"]))
    if "sim" in label and "," not in label:
        check(not res["gate_lines"], "%s: modeled run prints a gate line" % label)
    else:
        one_gate(label, res)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--workdir", default=".")
    ap.add_argument("--no-mpi", action="store_true")
    a = ap.parse_args()
    bench = os.path.abspath(a.bench)
    tmp = tempfile.mkdtemp(prefix="unilink-bench-strict-")
    small = ["-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"]

    # 1. single backend
    p = run([bench, "allreduce", "--backend", "host"] + small, cwd=a.workdir)
    check(p.returncode == 0, "single: exit %d %s" % (p.returncode, p.stderr))
    res = strict("single", p.stdout)
    check(len(res["rows"]) == 5, "single: %d rows" % len(res["rows"]))
    one_gate("single", res, avg_busbw(res["rows"]))
    check(len(res["devices"]) == 2, "single: device lines %s" % res["devices"])

    # 1b. synchronized per call (issue 18's second timing method): same strict table,
    # the method named in the preamble, each size's mean in the per-size comments
    p = run([bench, "allreduce", "--backend", "host", "--sync-per-call"] + small, cwd=a.workdir)
    check(p.returncode == 0, "sync-per-call: exit %d %s" % (p.returncode, p.stderr))
    res = strict("sync-per-call", p.stdout)
    check(len(res["rows"]) == 5, "sync-per-call: %d rows" % len(res["rows"]))
    one_gate("sync-per-call", res, avg_busbw(res["rows"]))
    check("# Synchronized per call" in p.stdout, "sync-per-call: method not named")
    means = [l.split() for l in p.stdout.splitlines()
             if l.startswith("# ") and len(l.split()) == 5 and l.split()[1].isdigit()]
    check(len(means) == 5 and all(float(m[4]) > 0 for m in means),
          "sync-per-call: per-size mean missing %s" % means)

    # 2. side by side: one block per backend, one gate line (host's), comparison on '#'
    p = run([bench, "allreduce", "--backends", "sim:dgx-h100,host"] + small, cwd=a.workdir)
    check(p.returncode == 0, "side by side: exit %d %s" % (p.returncode, p.stderr))
    res = strict("side by side", p.stdout)
    check(len(res["rows"]) == 10, "side by side: %d rows (want 2 blocks of 5)" % len(res["rows"]))
    one_gate("side by side", res, avg_busbw(res["rows"][:5]))  # measured block comes first
    check(p.stdout.index("# Backend: host") < p.stdout.index("# Backend: sim:dgx-h100"),
          "side by side: measured block not first")
    check("# Side by side" in p.stdout, "side by side: comparison missing")
    check("# Modeled links of rank 0: peer 1 over nvlink4 x18 (modeled, dgx-h100, confidence high)"
          in p.stdout, "side by side: the modeled block does not name its link and confidence")

    # 2b. a modeled link resting on one unverified claim is flagged where users see it
    p = run([bench, "allreduce", "--backend", "sim:ascend910b-8", "-t", "2"] + small, cwd=a.workdir)
    check(p.returncode == 0, "low confidence: exit %d %s" % (p.returncode, p.stderr))
    strict("low confidence", p.stdout)
    check("confidence low" in p.stdout and "# WARNING: low confidence" in p.stdout,
          "low confidence: no warning line for the HCCS figures")

    # 3. a failing backend in the list: non-zero, "Test failure", still one gate line
    p = run([bench, "allreduce", "--backends", "host,sim:no-such-preset"] + small, cwd=a.workdir)
    check(p.returncode != 0, "failed backend: exit 0")
    check("Test failure" in p.stdout, "failed backend: no 'Test failure'")
    res = strict("failed backend", p.stdout)
    check(res["failure"], "failed backend: failure line not recognised")
    one_gate("failed backend", res)

    # 4. nccl-tests program name
    perf = os.path.join(os.path.dirname(bench), "all_reduce_perf")
    p = run([perf, "-b", "8", "-e", "64K", "-f", "8", "-t", "2"], cwd=a.workdir)
    check(p.returncode == 0, "all_reduce_perf: exit %d %s" % (p.returncode, p.stderr))
    res = strict("all_reduce_perf", p.stdout)
    check(len(res["rows"]) == 5 and res["header"].get("nThread") == 2,
          "all_reduce_perf: rows %d header %s" % (len(res["rows"]), res["header"]))
    check("# Collective test starting: all_reduce_perf" in p.stdout, "all_reduce_perf: banner")
    one_gate("all_reduce_perf", res)

    # 5. JSON + NCCL_TESTS_MIN_BW failing: okay "false", non-zero exit, FAILED footer
    jpath = os.path.join(tmp, "minbw.json")
    p = run([bench, "allreduce", "--backends", "host,sim:dgx-h100", "-I", "1", "-J", jpath] + small,
            env={"NCCL_TESTS_MIN_BW": "100000"}, cwd=a.workdir)
    check(p.returncode != 0, "MIN_BW: exit 0")
    check("Test failure" in p.stdout, "MIN_BW: no 'Test failure'")
    res = strict("MIN_BW", p.stdout)
    check(res["footer"].get("avg_busbw_verdict") == "FAILED", "MIN_BW: footer %s" % res["footer"])
    doc = json.load(open(jpath))
    analyze_like(doc, "json")
    check(doc["average_bus_bandwidth"]["okay"] == "false", "MIN_BW: okay %s" % doc["average_bus_bandwidth"])
    check(all(r["backend"] == "host" for r in doc["results"]), "json: results not host's only")
    others = [b for b in doc.get("backends", []) if b.get("backend") == "sim:dgx-h100"]
    check(len(others) == 1 and len(others[0].get("results", [])) == len(doc["results"]),
          "json: sim's results list %s" % others)
    # and passing
    jpath = os.path.join(tmp, "minbw-ok.json")
    p = run([bench, "allreduce", "--backend", "host", "-J", jpath] + small,
            env={"NCCL_TESTS_MIN_BW": "0"}, cwd=a.workdir)
    check(p.returncode == 0, "MIN_BW 0: exit %d" % p.returncode)
    check(json.load(open(jpath))["average_bus_bandwidth"]["okay"] == "true", "MIN_BW 0: okay")

    # 5b. the v-collectives and their nccl-tests names, threads and the modeled backend
    for op in ("alltoallv", "allgatherv"):
        for be, extra in (("host", ["-t", "3"]), ("sim:dgx-h100", ["-t", "4"])):
            p = run([bench, op, "--backend", be] + extra + small, cwd=a.workdir)
            v_checks("%s %s" % (op, be), p, op, 5)
        perf = os.path.join(os.path.dirname(bench), op + "_perf")
        p = run([perf, "-b", "8", "-e", "64K", "-f", "8", "-t", "2", "-n", "3"], cwd=a.workdir)
        res = v_checks(op + "_perf", p, op, 5)
        check("# Collective test starting: %s_perf" % op in p.stdout, op + "_perf: banner")

    # 5c. a backend asked for by name that cannot run fails the run; "all" skips it
    p = run([bench, "allreduce", "--backends", "host,nccl"] + small, cwd=a.workdir)
    check(p.returncode != 0, "host,nccl without NCCL: exit 0")
    check("Test failure" in p.stdout and "nccl" in p.stdout.split("Test failure")[1],
          "host,nccl: no 'Test failure' naming nccl")
    check("# backend nccl failed:" in p.stdout, "host,nccl: no '# backend nccl failed' line")
    res = strict("host,nccl", p.stdout)
    one_gate("host,nccl", res)
    check(len(res["rows"]) == 5, "host,nccl: host's rows %d" % len(res["rows"]))
    p = run([bench, "allreduce", "--backends", "all"] + small, cwd=a.workdir)
    check(p.returncode == 0, "all: exit %d %s" % (p.returncode, p.stderr[-300:]))
    check("Test failure" not in p.stdout, "all: Test failure")
    check("# Backend: host" in p.stdout, "all: host did not run")
    strict("all", p.stdout)

    # 6. under mpirun
    mpirun = shutil.which("mpirun")
    if a.no_mpi or not mpirun:
        print("SKIP: mpirun cases (no mpirun)")
    else:
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               "OMPI_MCA_rmaps_base_oversubscribe": "1"}
        mp = [mpirun, "--oversubscribe", "-np"]
        p = run(mp + ["2", bench, "allreduce", "--backend", "host"] + small, env=env, cwd=a.workdir)
        if "not usable" in p.stderr or "unknown backend \"mpi\"" in p.stderr:
            print("SKIP: mpirun cases (mpi plugin not built)")
        else:
            check(p.returncode == 0, "mpirun np 2: exit %d %s" % (p.returncode, p.stderr[-400:]))
            res = strict("mpirun np 2", p.stdout)
            check(len(res["rows"]) == 5, "mpirun np 2: %d rows" % len(res["rows"]))
            check(len(res["devices"]) == 2, "mpirun np 2: device lines %s" % res["devices"])
            check(p.stdout.count("# Collective test starting") == 1, "mpirun np 2: banner count")
            one_gate("mpirun np 2", res)
            jpath = os.path.join(tmp, "np3.json")
            p = run(mp + ["3", bench, "allreduce", "--backend", "host", "-I", "1", "-J", jpath] + small,
                    env=env, cwd=a.workdir)
            check(p.returncode == 0, "mpirun np 3: exit %d %s" % (p.returncode, p.stderr[-400:]))
            if os.path.exists(jpath):
                doc = json.load(open(jpath))
                analyze_like(doc, "mpirun np 3 json", nprocs=3)
                pids = [d["pid"] for d in doc["config"]["devices"]]
                check(len(set(pids)) == 3 and all(x > 0 for x in pids), "np 3: pids %s" % pids)
            else:
                check(False, "mpirun np 3: no JSON written")
            p = run(mp + ["2", bench, "allreduce", "--backend", "host"] + small,
                    env=dict(env, NCCL_TESTS_SPLIT="MOD 2"), cwd=a.workdir)
            check(p.returncode == 0, "NCCL_TESTS_SPLIT: exit %d %s" % (p.returncode, p.stderr[-400:]))
            res = strict("NCCL_TESTS_SPLIT", p.stdout)
            groups = sorted(int(d.split()[4]) for d in res["devices"])
            check(groups == [0, 1], "NCCL_TESTS_SPLIT=MOD 2: groups %s" % groups)
            # the v-collectives on the mpi backend, 3 processes, and side by side with host
            for op in ("alltoallv", "allgatherv"):
                p = run(mp + ["3", bench, op, "--backend", "mpi"] + small, env=env, cwd=a.workdir)
                res = v_checks("mpirun np 3 %s mpi" % op, p, op, 5)
                check(ranks_of(res["devices"]) == [0, 1, 2],
                      "mpirun np 3 %s: Using devices %s" % (op, res["devices"]))
                p = run(mp + ["3", bench, op, "--backends", "mpi,host"] + small, env=env,
                        cwd=a.workdir)
                res = v_checks("mpirun np 3 %s mpi,host" % op, p, op, 10)
                blocks = p.stdout.split("# Backend: ")[1:]
                check(len(blocks) == 2 and blocks[0].startswith("mpi") and
                      blocks[1].startswith("host"), "mpi,host: blocks %s" %
                      [b.split("\n")[0] for b in blocks])
                for blk in blocks:
                    lines = [l.strip() for l in blk.splitlines() if l.startswith("#  Rank")]
                    check(ranks_of(lines) == [0, 1, 2], "mpi,host %s: Using devices of %s: %s" %
                          (op, blk.split("\n")[0], lines))
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
