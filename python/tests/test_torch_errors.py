"""Errors on backend "unilink" raise: bad arguments, a timeout, a killed rank."""
import os
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist

from _dist import run


def init(rank, world, store, seconds=60):
    import warnings
    warnings.simplefilter("ignore")
    import unilink.torch  # noqa: F401
    dist.init_process_group("unilink", init_method=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=seconds))


def bad_args(rank, world, store):
    init(rank, world, store)
    msgs = []
    for fn in (lambda: dist.all_reduce(torch.ones(4, 4).t()),            # not contiguous
               lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64), op=dist.ReduceOp.MAX),
               lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
               lambda: dist.all_to_all_single(torch.zeros(3), torch.zeros(3))):
        try:
            fn()
            msgs.append(None)
        except RuntimeError as e:
            msgs.append(str(e).split("\n")[0])
    # A dtype unilink has no counterpart for (int16 on torch 1.13): unilink.Unsupported.
    import unilink.torch as ut
    dtype_errs = []
    for fn in (lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
               lambda: dist.broadcast(torch.ones(3, dtype=torch.int16), 0)):
        try:
            fn()
            dtype_errs.append(None)
        except RuntimeError as e:
            err = ut.as_unilink_error(e)
            dtype_errs.append((type(err).__name__, err.sentence if err else str(e)))
    t = torch.ones(2)
    dist.all_reduce(t)  # the group still works
    dist.destroy_process_group()
    return msgs, t.tolist(), dtype_errs


def timeout(rank, world, store):
    init(rank, world, store, seconds=2)
    if rank == 1:
        time.sleep(6)  # alive but absent: rank 0 must time out, not hang
        return None
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        return "no error", time.monotonic() - t0
    except RuntimeError as e:
        import unilink.torch as ut
        err = ut.as_unilink_error(e)
        return (err.name if err else str(e)), time.monotonic() - t0


def killed(rank, world, store):
    init(rank, world, store, seconds=10)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == world - 1:
        os._exit(9)  # dies without a word
    time.sleep(0.5)
    t0 = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
        return "no error", time.monotonic() - t0
    except RuntimeError as e:
        return str(e).split("\n")[0], time.monotonic() - t0


class Errors(unittest.TestCase):
    def test_bad_arguments_raise_and_leave_group_usable(self):
        for msgs, t, dtype_errs in run(bad_args, 2, 120):
            for m in msgs:
                self.assertIsNotNone(m, "a bad call did not raise")
            # complex MAX is refused by torch itself; the others by unilink.
            for m in (msgs[0], msgs[2], msgs[3]):
                self.assertIn("unilink", m)
            for e in dtype_errs:
                self.assertIsNotNone(e, "an int16 tensor did not raise")
                self.assertEqual(e[0], "Unsupported", e)
                self.assertIn("Short", e[1])
                self.assertIn("supported: bool, uint8", e[1])
            self.assertEqual(t, [2.0, 2.0])

    def test_timeout_raises(self):
        name, took = run(timeout, 2, 120)[0]
        self.assertEqual(name, "UL_ERR_TIMEOUT")
        self.assertLess(took, 10)

    def test_killed_rank_raises_in_survivors(self):
        for res in run(killed, 3, 120, expect_exit=(2,))[:2]:
            msg, took = res
            self.assertNotEqual(msg, "no error")
            self.assertTrue("UL_ERR_PEER_LOST" in msg or "UL_ERR_TIMEOUT" in msg, msg)
            self.assertLess(took, 30)


if __name__ == "__main__":
    unittest.main()
