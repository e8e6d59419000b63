#!/usr/bin/python3
"""torch.distributed.all_reduce of CPU float32 tensors: backend unilink against gloo in
one run, 2 processes, interleaved rounds, medians, ratio table; then the per-call overhead
of the Python/torch layer over the C library at 8 bytes.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_vs_gloo.py [--rounds 5] [--max 256M]

A worker that dies ends the run with an error at once; a note about other jobs is printed
only when the load average says the machine was busy.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def fmt(n):
    for unit, v in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= v:
            return "%d%s" % (n // v, unit)
    return "%dB" % n


def iters_for(nbytes):
    return max(3, min(200, (64 << 20) // max(nbytes, 1) // 4))


def worker(rank, n, store_path, args, q):
    import unilink.torch  # registers "unilink"
    from unilink import _C
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=n)
    groups = {"gloo": dist.group.WORLD, "unilink": dist.new_group(backend="unilink")}
    sizes = []
    s = args.min
    while s <= args.max:
        sizes.append(s)
        s *= 4
    # "unilink-zc": the same group on tensors from unilink.torch.empty (peers map them).
    variants = ["gloo", "unilink", "unilink-zc"]
    times = {(b, s): [] for b in variants for s in sizes}
    for rnd in range(args.rounds):
        for s in sizes:
            plain = torch.ones(s // 4, dtype=torch.float32)
            zc = unilink.torch.empty(s // 4, group=groups["unilink"])
            zc.fill_(1.0)
            order = variants if rnd % 2 == 0 else list(reversed(variants))
            for b in order:
                g = groups[b.split("-")[0]]
                t = zc if b == "unilink-zc" else plain
                k = iters_for(s)
                dist.all_reduce(t, group=g)  # warm-up
                dist.barrier(group=groups["gloo"])
                t0 = time.perf_counter()
                for _ in range(k):
                    dist.all_reduce(t, group=g)
                dt = (time.perf_counter() - t0) / k
                times[(b, s)].append(dt)
    # Overhead at 8 bytes: torch.distributed path vs the C loop on the same communicator.
    small = torch.ones(2, dtype=torch.float32)
    ug = groups["unilink"]
    comm = dict(_C.ProcessGroupUnilink.comms(ug))["cpu"] if hasattr(ug, "comms") else None
    torch_t, c_t, pg_t = [], [], []
    for _ in range(args.rounds):
        dist.barrier(group=groups["gloo"])
        k = 20000
        t0 = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(small, group=ug)
        torch_t.append((time.perf_counter() - t0) / k)
        dist.barrier(group=groups["gloo"])
        t0 = time.perf_counter()
        for _ in range(k):
            ug.allreduce([small])  # the backend through pybind, without dist's Python wrapper
        pg_t.append((time.perf_counter() - t0) / k)
        dist.barrier(group=groups["gloo"])
        c_t.append(_C.time_allreduce(comm, 2, k))
    if rank == 0:
        q.put((sizes, {k: statistics.median(v) for k, v in times.items()},
               statistics.median(torch_t), statistics.median(c_t), statistics.median(pg_t)))
    dist.barrier(group=groups["gloo"])
    dist.destroy_process_group()


def collect(procs, q, timeout_s):
    """Rank 0's result, then every worker's exit. A worker that dies (or exits with an
    error) is an error within a second, not after the whole timeout."""
    import queue
    deadline = time.monotonic() + timeout_s
    result = None
    while True:
        if result is None:
            try:
                result = q.get(timeout=0.5)
            except queue.Empty:
                pass
        else:
            time.sleep(0.1)
        codes = [p.exitcode for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            raise RuntimeError("; ".join(
                "rank %d %s" % (r, "killed by signal %d" % -c if c < 0 else "exited with %d" % c)
                for r, c in bad) + "; stopping")
        if result is None and all(c == 0 for c in codes):
            try:  # rank 0 may have finished just after the last look at the queue
                return q.get(timeout=1)
            except queue.Empty:
                raise RuntimeError("workers exited without a result")
        if result is not None and all(c == 0 for c in codes):
            return result
        if time.monotonic() > deadline:
            raise RuntimeError("no result after %ds (--timeout)" % timeout_s)


def stop(procs):
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min", type=parse_size, default=4 << 10)
    ap.add_argument("--max", type=parse_size, default=256 << 20)
    ap.add_argument("--timeout", type=int, default=3600,
                    help="seconds before giving up on workers that are alive but silent")
    args = ap.parse_args()
    n = 2
    fd, store = tempfile.mkstemp(prefix="unilink-bench-store-")
    os.close(fd)
    os.unlink(store)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    load_start = os.getloadavg()[0]
    procs = [ctx.Process(target=worker, args=(r, n, store, args, q)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        sizes, med, torch_t, c_t, pg_t = collect(procs, q, args.timeout)
    except RuntimeError as e:
        print("torch_vs_gloo: %s" % e, file=sys.stderr)
        return 1
    finally:
        stop(procs)
        if os.path.exists(store):
            os.unlink(store)
    load_end = os.getloadavg()[0]
    busbw = lambda s, t: s * 2 * (n - 1) / n / t / 1e9
    print("all_reduce, CPU float32, 2 processes, torch %s, %d interleaved rounds, median per call"
          % (torch.__version__, args.rounds))
    print("busbw in GB/s; ratio = gloo time / unilink time; zc = tensors from unilink.torch.empty")
    print("%8s %11s %11s %11s %9s %9s %9s %8s %8s" % (
        "size", "gloo us", "unilink us", "zc us", "gloo", "unilink", "zc", "ratio", "zc ratio"))
    worst = worst_zc = None
    for s in sizes:
        g, u, z = med[("gloo", s)], med[("unilink", s)], med[("unilink-zc", s)]
        print("%8s %11.1f %11.1f %11.1f %9.2f %9.2f %9.2f %7.2fx %7.2fx" % (
            fmt(s), g * 1e6, u * 1e6, z * 1e6, busbw(s, g), busbw(s, u), busbw(s, z), g / u, g / z))
        worst = g / u if worst is None else min(worst, g / u)
        worst_zc = g / z if worst_zc is None else min(worst_zc, g / z)
    print("lowest ratio: %.2fx (ordinary tensors), %.2fx (unilink.torch.empty tensors)"
          % (worst, worst_zc))
    print("8-byte all_reduce per call: dist.all_reduce %.2f us, pg.allreduce %.2f us, C library "
          "loop %.2f us; Python/torch layer %.2f us (torch's dist wrapper %.2f, binding %.2f)"
          % (torch_t * 1e6, pg_t * 1e6, c_t * 1e6, (torch_t - c_t) * 1e6, (torch_t - pg_t) * 1e6,
             (pg_t - c_t) * 1e6))
    # Other work competes with the ranks once it needs more than the CPUs the ranks leave
    # free. The 1-minute load average: before the run it is all other work; at the end it
    # also counts our n ranks (fully only after a minute, so short runs err on the quiet side).
    cpus = os.cpu_count() or n
    other = max(load_start, load_end - n)
    if other > max(cpus - n, 0) + 0.5:
        print("note: other jobs were running (load average %.1f at start, %.1f at end, %d CPUs,"
              " %d ranks): expect noisy timings" % (load_start, load_end, cpus, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
