"""DistributedDataParallel on backend "unilink" gives bit-identical parameters to gloo.

Two processes, same seed, same data. With 2 ranks the averaged gradient is (a + b) / 2:
one addition, commutative, so any correct allreduce gives the same bits as gloo's."""
import unittest

import torch
import torch.distributed as dist

from _dist import gloo_and_unilink, run


def train(group, rank, steps=8):
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(99 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def body(rank, world, store):
    gloo, ul = gloo_and_unilink(rank, world, store)
    ref = train(gloo, rank)
    got = train(ul, rank)
    same = all(torch.equal(a, b) for a, b in zip(ref, got))
    # ranks agree with each other too (DDP keeps replicas in sync)
    flat = torch.cat([p.view(-1) for p in got])
    other = flat.clone()
    dist.broadcast(other, src=0, group=ul)
    dist.destroy_process_group()
    return same, torch.equal(flat, other), float(flat.abs().sum())


class DDP(unittest.TestCase):
    def test_ddp_bit_identical_to_gloo(self):
        res = run(body, 2, 300)
        for r, (same, synced, norm) in enumerate(res):
            self.assertTrue(same, "rank %d: parameters differ from gloo's" % r)
            self.assertTrue(synced, "rank %d: replicas differ" % r)
            self.assertGreater(norm, 0)


if __name__ == "__main__":
    unittest.main()
