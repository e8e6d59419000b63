#!/usr/bin/env python3
"""bench/tuning_rules.py: the limits calibrate-host.sh writes, on hand-made ratios, and
the machine-id line it writes first. With --bench PATH (unilink-bench), also that the
library reads a table cached under that line by default (UNILINK_TUNING_FILE=auto) and
leaves it with UNILINK_TUNING_FILE=none."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tuning_rules as t  # noqa: E402

K = 1024
M = K * K
failures = []


def check(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got}, want {want}")
        print("FAIL:", failures[-1])


# staged wins up to 8K, loses above
check(t.staged_limit({1 * K: 0.5, 2 * K: 0.6, 4 * K: 0.8, 8 * K: 0.9, 16 * K: 1.5}), 8 * K,
      "staged up to 8K")
# one noisy point (16K at 0.95) after a clear loss does not move the limit past it
check(t.staged_limit({1 * K: 0.5, 2 * K: 0.6, 4 * K: 2.0, 8 * K: 1.2, 16 * K: 0.95}), 2 * K,
      "noise after the crossover")
check(t.staged_limit({1 * K: 1.2, 2 * K: 1.5}), 0, "direct everywhere")
check(t.staged_limit({1 * K: 1.0, 2 * K: 1.0}), 0, "a tie keeps the shorter prefix")
# bounce loses below 16M (cache-resident single copies), wins from 16M
check(t.bounce_from({256 * K: 1.3, 1 * M: 1.16, 4 * M: 1.11, 16 * M: 0.76, 64 * M: 0.65}),
      16 * M, "single copies below 16M")
check(t.bounce_from({256 * K: 0.8, 1 * M: 0.7, 4 * M: 0.7}), 256 * K, "bounce everywhere")
check(t.bounce_from({256 * K: 1.0, 1 * M: 1.0}), 256 * K, "a tie bounces (the default)")
check(t.bounce_from({256 * K: 1.2, 1 * M: 1.3}), 2 * M, "single copies at every measured size")
# a small loss at one size among gains does not keep single copies there
check(t.bounce_from({256 * K: 0.7, 1 * M: 1.05, 4 * M: 0.6}), 256 * K, "one noisy point")

# the machine-id line: cpuinfo's first model name, trimmed as the library trims it
with tempfile.TemporaryDirectory() as d:
    info = os.path.join(d, "cpuinfo")
    with open(info, "w") as f:
        f.write("processor\t: 0\nmodel name\t:  Fancy CPU 9000 \t\nprocessor\t: 1\n"
                "model name\t: Other\n")
    ncpu = os.sysconf("SC_NPROCESSORS_ONLN")
    check(t.machine_id(info), f"# machine-id: Fancy CPU 9000 | {ncpu}", "model and CPUs")
    with open(info, "w") as f:
        f.write("processor\t: 0\nBogoMIPS\t: 50.00\n")  # no model name (some arm64 kernels)
    check(t.machine_id(info), f"# machine-id:  | {ncpu}", "no model name")
host = os.uname().nodename
check(t.cached_table_path({"XDG_CACHE_HOME": "/x", "HOME": "/h"}),
      f"/x/unilink/host-tuning-{host}.txt", "XDG_CACHE_HOME first")
check(t.cached_table_path({"XDG_CACHE_HOME": "", "HOME": "/h"}),
      f"/h/.cache/unilink/host-tuning-{host}.txt", "else HOME/.cache")
check(t.cached_table_path({}), None, "neither")


def selection(bench, cache, setting):
    """The algorithm of a 64 KiB broadcast between 2 thread ranks, and the run's log."""
    env = dict(os.environ, XDG_CACHE_HOME=cache, UNILINK_DEBUG="info",
               UNILINK_DEBUG_SUBSYS="TUNING")
    env.pop("UNILINK_TUNING_FILE", None)
    if setting is not None:
        env["UNILINK_TUNING_FILE"] = setting
    r = subprocess.run([bench, "broadcast", "-t", "2", "-b", "64K", "-e", "64K", "-n", "3", "-w",
                        "1", "--backends", "host"], env=env, capture_output=True, text=True,
                       timeout=120)
    algo = [ln.split()[2] for ln in r.stdout.splitlines()
            if ln.startswith("#") and len(ln.split()) > 2 and ln.split()[1] == "65536"]
    return (algo[0] if algo else f"none (exit {r.returncode})"), r.stdout + r.stderr


if "--bench" in sys.argv:
    bench = sys.argv[sys.argv.index("--bench") + 1]
    with tempfile.TemporaryDirectory() as cache:
        # the path calibrate-host.sh writes by default: the library must read that file
        table = t.cached_table_path({"XDG_CACHE_HOME": cache})
        os.makedirs(os.path.dirname(table))
        # this machine's line, as calibrate-host.sh writes it: the table moves the limit
        # from the built-in 32 KiB to 1 MiB, so 64 KiB runs staged
        with open(table, "w") as f:
            f.write(t.machine_id() + "\nbroadcast 2 thread 1048576\n")
        algo, log = selection(bench, cache, None)
        check(algo, "staged", "auto reads this host's cached table")
        check(f"selection limits measured here: {table}" in log, True, "auto says which table")
        algo, _ = selection(bench, cache, "none")
        check(algo, "direct", "none: built-in limits")
        # another machine's line (or none at all): the built-in limits, and a warning
        for first in ["# machine-id: Not This CPU | 4097\n", ""]:
            with open(table, "w") as f:
                f.write(first + "broadcast 2 thread 1048576\n")
            algo, log = selection(bench, cache, None)
            check(algo, "direct", f"a table without this machine's line ({first.strip()!r})")
            check("measured on another machine" in log, True, "the warning says why")
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("OK")
