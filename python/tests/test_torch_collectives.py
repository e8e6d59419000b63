"""Every torch.distributed collective on backend "unilink" against a reference computed
locally, on 2 and 3 processes. Inputs are small integers, exact in every dtype used."""
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist

from _dist import run

R = dist.ReduceOp


def inp(rank, n=6, dtype=torch.float32):
    # rank-dependent small integers: sums/products of up to 3 ranks stay exact.
    return (torch.arange(n) % 3 + 1 + rank).to(dtype)


def all_inputs(world, n=6, dtype=torch.float32):
    return [inp(r, n, dtype) for r in range(world)]


def ref_reduce(xs, op):
    out = xs[0].clone()
    for x in xs[1:]:
        if op == R.SUM or op == R.AVG:
            out = out + x
        elif op == R.PRODUCT:
            out = out * x
        elif op == R.MIN:
            out = torch.minimum(out, x)
        elif op == R.MAX:
            out = torch.maximum(out, x)
        elif op == R.BAND:
            out = out & x
        elif op == R.BOR:
            out = out | x
        elif op == R.BXOR:
            out = out ^ x
    if op == R.AVG:
        out = out / len(xs)
    return out


def check(failures, what, got, want):
    if not torch.equal(got, want.to(got.dtype)):
        failures.append("%s: got %s want %s" % (what, got.tolist(), want.tolist()))


def body(rank, world, store):
    import warnings
    warnings.simplefilter("ignore")  # torch 1.13 deprecation notices
    import unilink.torch  # noqa: F401
    dist.init_process_group("unilink", init_method=store, rank=rank, world_size=world)
    f = []
    # all_reduce: every op torch offers, over the dtypes that support it.
    float_ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for op in float_ops:
            t = inp(rank, dtype=dt)
            dist.all_reduce(t, op=op)
            check(f, "all_reduce %s %s" % (dt, op), t, ref_reduce(all_inputs(world, dtype=dt), op))
    for dt in (torch.int8, torch.uint8, torch.int32, torch.int64):
        for op in [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]:
            t = inp(rank, dtype=dt)
            dist.all_reduce(t, op=op)
            check(f, "all_reduce %s %s" % (dt, op), t, ref_reduce(all_inputs(world, dtype=dt), op))
    t = torch.tensor([rank == 0, rank == 1, False, True])
    dist.all_reduce(t)  # bool sum = logical or
    check(f, "all_reduce bool", t, torch.tensor([True, True, False, True]))
    t = inp(rank)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    check(f, "all_reduce premul_sum", t, 2 * ref_reduce(all_inputs(world), R.SUM))
    t = inp(rank, dtype=torch.float32).to(torch.complex64)
    dist.all_reduce(t)
    check(f, "all_reduce complex", t, ref_reduce([x.to(torch.complex64) for x in all_inputs(world)], R.SUM))
    # async work, wait() and futures
    t = inp(rank)
    w = dist.all_reduce(t, async_op=True)
    # Work is born complete (the call ran to the end): any wait timeout returns True.
    if not (w.is_completed() and w.is_success() and w.wait(timeout=timedelta(milliseconds=1))):
        f.append("async all_reduce: Work not complete at return")
    w.wait()
    check(f, "async all_reduce", t, ref_reduce(all_inputs(world), R.SUM))
    t = inp(rank)
    fut = dist.all_reduce(t, async_op=True).get_future()
    check(f, "future all_reduce", fut.wait()[0], ref_reduce(all_inputs(world), R.SUM))
    # broadcast / reduce from every root
    for root in range(world):
        t = inp(rank, dtype=torch.int64)
        dist.broadcast(t, src=root)
        check(f, "broadcast root %d" % root, t, inp(root, dtype=torch.int64))
        t = inp(rank)
        dist.reduce(t, dst=root, op=R.MAX)
        if rank == root:
            check(f, "reduce root %d" % root, t, ref_reduce(all_inputs(world), R.MAX))
    # all_gather forms
    outs = [torch.zeros(6) for _ in range(world)]
    dist.all_gather(outs, inp(rank))
    for r in range(world):
        check(f, "all_gather[%d]" % r, outs[r], inp(r))
    out = torch.zeros(world * 6)
    dist.all_gather_into_tensor(out, inp(rank))
    check(f, "all_gather_into_tensor", out, torch.cat(all_inputs(world)))
    out = torch.zeros(world * 6)
    dist._all_gather_base(out, inp(rank))
    check(f, "_all_gather_base", out, torch.cat(all_inputs(world)))
    outs = [[torch.zeros(6) for _ in range(world)], [torch.zeros(3) for _ in range(world)]]
    dist.all_gather_coalesced(outs, [inp(rank), inp(rank, 3)])
    for r in range(world):
        check(f, "all_gather_coalesced", outs[1][r], inp(r, 3))
    # reduce_scatter forms: rank r gets block r of the reduction
    full = [inp(r, 6 * world) for r in range(world)]
    want = ref_reduce(full, R.SUM).view(world, 6)[rank]
    out = torch.zeros(6)
    dist.reduce_scatter(out, list(inp(rank, 6 * world).view(world, 6).unbind(0)))
    check(f, "reduce_scatter", out, want)
    out = torch.zeros(6)
    dist.reduce_scatter_tensor(out, inp(rank, 6 * world))
    check(f, "reduce_scatter_tensor", out, want)
    out = torch.zeros(6)
    dist._reduce_scatter_base(out, inp(rank, 6 * world), op=R.MIN)
    check(f, "_reduce_scatter_base min", out, ref_reduce(full, R.MIN).view(world, 6)[rank])
    out = torch.zeros(6, dtype=torch.int32)
    dist.reduce_scatter_tensor(out, inp(rank, 6 * world, torch.int32), op=R.BXOR)
    check(f, "reduce_scatter_tensor bxor", out,
          ref_reduce([x.int() for x in full], R.BXOR).view(world, 6)[rank])
    # all_to_all: block j of rank i -> block i of rank j
    x = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    out = torch.zeros(world * 2)
    dist.all_to_all_single(out, x)
    want = torch.cat([torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32) + 100 * j
                      for j in range(world)])
    check(f, "all_to_all_single", out, want)
    # with splits: rank i sends (i + j + 1) rows of 2 to rank j
    rows = lambda i, j: i + j + 1
    send = torch.cat([torch.full((rows(rank, j), 2), float(10 * rank + j)) for j in range(world)])
    recv = torch.zeros(sum(rows(j, rank) for j in range(world)), 2)
    dist.all_to_all_single(recv, send, [rows(j, rank) for j in range(world)],
                           [rows(rank, j) for j in range(world)])
    want = torch.cat([torch.full((rows(j, rank), 2), float(10 * j + rank)) for j in range(world)])
    check(f, "all_to_all_single splits", recv, want)
    ins = [torch.full((j + 1,), float(10 * rank + j)) for j in range(world)]
    outs = [torch.zeros(rank + 1) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        check(f, "all_to_all[%d]" % j, outs[j], torch.full((rank + 1,), float(10 * j + rank)))
    # gather / scatter
    for root in range(world):
        g = [torch.zeros(6) for _ in range(world)] if rank == root else None
        dist.gather(inp(rank), g, dst=root)
        if rank == root:
            for r in range(world):
                check(f, "gather root %d [%d]" % (root, r), g[r], inp(r))
        out = torch.zeros(6)
        dist.scatter(out, all_inputs(world) if rank == root else None, src=root)
        check(f, "scatter root %d" % root, out, inp(rank))
    dist.barrier()
    # point to point: a ring through batch_isend_irecv, then a blocking pair
    send = inp(rank)
    recv = torch.zeros(6)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, (rank + 1) % world),
                                   dist.P2POp(dist.irecv, recv, (rank - 1) % world)])
    for q in reqs:
        q.wait()
    check(f, "batch_isend_irecv ring", recv, inp((rank - 1) % world))
    if rank == 0:
        dist.send(inp(7), dst=1)
    elif rank == 1:
        t = torch.zeros(6)
        dist.recv(t, src=0)
        check(f, "send/recv", t, inp(7))
    ts = [inp(rank, 6, torch.float64), inp(rank, 3, torch.float64)]
    dist.all_reduce_coalesced(ts)
    check(f, "all_reduce_coalesced", ts[1], ref_reduce(all_inputs(world, 3, torch.float64), R.SUM))
    # a sub-group over ranks 0 and 1
    sub = dist.new_group([0, 1], backend="unilink")
    if rank < 2:
        t = inp(rank)
        dist.all_reduce(t, group=sub)
        check(f, "subgroup all_reduce", t, ref_reduce(all_inputs(2), R.SUM))
    dist.destroy_process_group()
    return f


class Collectives(unittest.TestCase):
    def _world(self, n):
        for r, fails in enumerate(run(body, n, 240)):
            self.assertEqual(fails, [], "rank %d" % r)

    def test_two_processes(self):
        self._world(2)

    def test_three_processes(self):
        self._world(3)


if __name__ == "__main__":
    unittest.main()
