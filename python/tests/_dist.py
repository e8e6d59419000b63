"""Run a function on N torch.distributed processes (spawned), with a bounded wait.

run(fn, n, timeout_s, *args) -> list of per-rank results; a rank's exception comes
back as its traceback text and fails the test. Every process gets a fresh file store."""
import os
import tempfile
import traceback

import torch.multiprocessing as mp


def _entry(fn, rank, n, store, q, args):
    try:
        q.put((rank, True, fn(rank, n, store, *args)))
    except BaseException:  # report everything, the parent decides
        q.put((rank, False, traceback.format_exc()))


def run(fn, n, timeout_s, *args, expect_exit=()):
    fd, store = tempfile.mkstemp(prefix="unilink-test-store-")
    os.close(fd)
    os.unlink(store)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(fn, r, n, "file://" + store, q, args))
             for r in range(n)]
    for p in procs:
        p.start()
    results, errors = {}, []
    try:
        want = n - len(expect_exit)
        import queue
        while len(results) < want:
            try:
                rank, ok, val = q.get(timeout=timeout_s)
            except queue.Empty:
                errors.append("timed out after %ss waiting for ranks %s" % (
                    timeout_s, sorted(set(range(n)) - set(results) - set(expect_exit))))
                break
            results[rank] = val
            if not ok:
                errors.append("rank %d:\n%s" % (rank, val))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        if os.path.exists(store):
            os.unlink(store)
    if errors:
        raise AssertionError("\n".join(errors))
    return [results.get(r) for r in range(n)]


def gloo_and_unilink(rank, world, store):
    """In a worker: the default group on gloo and a group of the same ranks on unilink,
    for tests that compare the two (warnings off: torch 1.13 warns about new groups)."""
    import warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    import unilink.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
    return dist.group.WORLD, dist.new_group(backend="unilink")
