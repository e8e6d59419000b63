"""init_process_group("unilink") with the tcp:// and env:// init methods (file:// is what
the other tests use): 2 processes, the unique id travels through the TCPStore they make,
all_reduce checked exactly."""
import os
import socket
import unittest

import torch
import torch.distributed as dist

from _dist import run


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(rank, world, _file_store, how, port):
    import warnings
    warnings.simplefilter("ignore")
    import unilink.torch  # noqa: F401
    if how == "tcp":
        dist.init_process_group("unilink", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world)
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world))
        dist.init_process_group("unilink", init_method="env://")
    backend = dist.get_backend()
    f = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(f)
    big = torch.full((7,), (1 << 40) + rank, dtype=torch.int64)  # beyond float precision
    dist.all_reduce(big, op=dist.ReduceOp.SUM)
    mx = torch.tensor([rank, -rank], dtype=torch.int32)
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    devices = [d for d, _ in dist.group.WORLD.comms()]
    dist.destroy_process_group()
    want = torch.arange(1000, dtype=torch.float32) * 3
    return backend, torch.equal(f, want), big.tolist(), mx.tolist(), devices


class InitMethods(unittest.TestCase):
    def check(self, how):
        for r, res in enumerate(run(body, 2, 120, how, free_port())):
            backend, f_ok, big, mx, devices = res
            self.assertEqual(backend, "unilink", "rank %d" % r)
            self.assertTrue(f_ok, "rank %d: float32 all_reduce differs" % r)
            self.assertEqual(big, [(1 << 41) + 1] * 7, "rank %d" % r)
            self.assertEqual(mx, [1, 0], "rank %d" % r)
            self.assertEqual(devices, ["cpu"], "rank %d" % r)

    def test_tcp(self):
        self.check("tcp")

    def test_env(self):
        self.check("env")


if __name__ == "__main__":
    unittest.main()
