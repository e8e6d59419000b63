#!/usr/bin/env python3
"""nccl-tests' environment settings in unilink-bench (docs/bench.md): NCCL_TESTS_DEVICE
(refused with a sentence on a backend without devices, skipped under "all", honoured on
the fake CUDA runtime when it is built: devices 2 and 3 for NCCL_TESTS_DEVICE=2 -t 2) and
NCCL_TESTS_ALLTOALLV_SPREAD / _MATRIX_FILE / _MATRIX_SCALE / _PRINT_SUMMARY (sizes as
nccl-tests' src/alltoallv.cu computes them, #wrong 0, bad input refused).

Usage: test_bench_env.py --bench BIN [--workdir DIR]
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import test_bench_strict as T  # noqa: E402  (check, run, strict, v_checks)

check, run = T.check, T.run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--workdir", default=".")
    a = ap.parse_args()
    bench = os.path.abspath(a.bench)
    a2av = os.path.join(os.path.dirname(bench), "alltoallv_perf")
    tmp = tempfile.mkdtemp(prefix="unilink-bench-env-")
    small = ["-n", "3", "-w", "1"]

    # NCCL_TESTS_DEVICE
    p = run([bench, "allreduce", "--backend", "host", "-b", "8", "-e", "64"] + small,
            env={"NCCL_TESTS_DEVICE": "1"}, cwd=a.workdir)
    check(p.returncode != 0 and "Test failure" in p.stdout, "DEVICE on host: exit %d" % p.returncode)
    check("NCCL_TESTS_DEVICE=1" in p.stdout and "has none to select" in p.stdout,
          "DEVICE on host: no sentence: %s" % p.stdout[-300:])
    p = run([bench, "allreduce", "--backend", "host"], env={"NCCL_TESTS_DEVICE": "one"})
    check(p.returncode == 255 and "NCCL_TESTS_DEVICE" in p.stderr, "DEVICE=one: %d" % p.returncode)
    p = run([bench, "allreduce", "--backends", "all", "-b", "8", "-e", "64"] + small,
            env={"NCCL_TESTS_DEVICE": "1"}, cwd=a.workdir)
    check("# skipped backend host: NCCL_TESTS_DEVICE" in p.stdout, "DEVICE with all: not skipped")
    build = os.path.dirname(os.path.dirname(bench))
    fake = os.path.join(build, "fakegpu", "lib")
    if os.path.exists(os.path.join(build, "lib", "libunilink-cuda.so")) and \
            any(f.startswith("libcudart") for f in os.listdir(fake) if os.path.isdir(fake)):
        env = {"LD_LIBRARY_PATH": fake, "FAKEGPU_GPUS": "4", "NCCL_TESTS_DEVICE": "2"}
        for extra in (["-t", "2"], ["-t", "1", "-g", "2"]):
            p = run([bench, "allreduce", "--backend", "cuda", "-b", "8", "-e", "64"] + extra + small,
                    env=env, cwd=a.workdir)
            res = T.strict("DEVICE=2 cuda %s" % extra, p.stdout)
            devs = sorted(int(d.split()[10]) for d in res["devices"])
            check(p.returncode == 0 and devs == [2, 3], "DEVICE=2 cuda %s: exit %d devices %s %s" %
                  (extra, p.returncode, devs, p.stderr[-300:]))
    else:
        print("SKIP: NCCL_TESTS_DEVICE on a device backend (fake CUDA runtime not built)")

    # NCCL_TESTS_ALLTOALLV_*: 4 ranks, -b 1K: 64 floats per peer, 1024 bytes per rank in all
    def sizes(env, extra=()):
        p = run([a2av, "-t", "4", "-b", "1K", "-e", "1K"] + list(extra) + small, env=env,
                cwd=a.workdir)
        res = T.v_checks("alltoallv %s" % env, p, "alltoallv", 1)
        return p, [(r["size"], r["count"]) for r in res["rows"]]
    # spread 1 (default): distances 1..3 get 1024*d/6 rounded down to 16: 160+336+512
    p, got = sizes({})
    check(got == [(1008, 64)], "spread 1: %s" % got)
    p, got = sizes({"NCCL_TESTS_ALLTOALLV_SPREAD": "0"})
    check(got == [(1024, 64)], "spread 0 (alltoall's traffic): %s" % got)
    p, got = sizes({"NCCL_TESTS_ALLTOALLV_SPREAD": "7"})  # clamped to 1, as nccl-tests
    check(got == [(1008, 64)], "spread 7: %s" % got)
    mfile = os.path.join(tmp, "m.txt")
    with open(mfile, "w") as f:
        f.write("100 200 150 0\n50 100 75 0\n300 150 200 0\n0 0 0 64\n")
    env = {"NCCL_TESTS_ALLTOALLV_MATRIX_FILE": mfile, "NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY": "1"}
    p, got = sizes(env)  # cells rounded down to 16: rank 2 sends 288+144+192 = 624
    check(got == [(624, 0)], "matrix: %s" % got)
    check("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=4 matrix_dim=4" in p.stdout and
          "#   rank=2 send_bytes=624 recv_bytes=400" in p.stdout, "matrix summary: %s" % p.stdout)
    p, got = sizes(dict(env, NCCL_TESTS_ALLTOALLV_MATRIX_SCALE="0.5"))
    check(got == [(304, 0)], "matrix scale 0.5: %s" % got)  # 144+64+96
    p = run([a2av, "-t", "4", "-b", "8", "-e", "1K"], env=env)
    check(p.returncode == 255 and "-b and -e" in p.stderr, "matrix with a sweep: %d" % p.returncode)
    p = run([a2av, "-t", "4", "-b", "64", "-e", "64"] + small, env=env, cwd=a.workdir)
    check(p.returncode != 0 and "maxBytes (-e) must be at least 624" in p.stdout,
          "matrix -e too small: %d %s" % (p.returncode, p.stdout[-300:]))
    p = run([a2av, "-t", "5", "-b", "1K", "-e", "1K"] + small, env=env, cwd=a.workdir)
    check(p.returncode != 0 and "smaller than the 5 ranks" in p.stdout, "matrix too small: %d" %
          p.returncode)
    with open(mfile, "w") as f:
        f.write("1 2\n3\n")
    for bad_env, why in (({"NCCL_TESTS_ALLTOALLV_MATRIX_FILE": mfile}, "row 2 has 1 values"),
                         ({"NCCL_TESTS_ALLTOALLV_MATRIX_FILE": mfile + ".none"}, "cannot open"),
                         ({"NCCL_TESTS_ALLTOALLV_SPREAD": "wide"}, "is not a number")):
        p = run([a2av, "-t", "2", "-b", "1K", "-e", "1K"], env=bad_env)
        check(p.returncode == 255 and why in p.stderr, "%s: %d %s" % (bad_env, p.returncode, p.stderr))
    if T.failures:
        print("%d failure(s)" % len(T.failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
