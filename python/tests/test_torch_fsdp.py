"""FullyShardedDataParallel on backend "unilink" wherever this torch runs it on gloo.

Debian's torch 1.13 cannot run FSDP on the CPU: under Python 3.11 the module does not even
import (torch.distributed._shard declares a dataclass with a mutable default), and 1.13's
FSDP puts a CPU module on CUDA anyway; both fail inside torch before any collective,
whatever the backend. So this test wraps the same module
under gloo and under unilink: where gloo trains, unilink must give bit-identical
parameters (2 ranks: every reduction is one addition); where gloo fails, unilink must
fail the same way, from torch, not from unilink."""
import unittest

import torch
import torch.distributed as dist

from _dist import gloo_and_unilink, run


def train(group, rank, steps=4):
    torch.manual_seed(4321)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    try:
        # Debian's torch 1.13 under Python 3.11 fails already here (a dataclass with a
        # mutable default in torch.distributed._shard)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        fsdp = FSDP(model, process_group=group)
        opt = torch.optim.SGD(fsdp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(7 + rank)
        for _ in range(steps):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(fsdp(x), y).backward()
            opt.step()
        with FSDP.summon_full_params(fsdp):
            return ("trained", [p.detach().clone() for p in fsdp.parameters()])
    except Exception as e:  # torch's own refusal: its type and sentence
        return ("failed", "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))


def body(rank, world, store):
    gloo, ul = gloo_and_unilink(rank, world, store)
    ref = train(gloo, rank)
    got = train(ul, rank)
    dist.destroy_process_group()
    if ref[0] == "trained" and got[0] == "trained":
        return ("trained", all(torch.equal(a, b) for a, b in zip(ref[1], got[1])), "")
    return (ref[0], got[0], ref[1] if ref[0] == "failed" else got[1])


class FSDP(unittest.TestCase):
    def test_fsdp_like_gloo(self):
        for r, (ref, got, why) in enumerate(run(body, 2, 300)):
            if ref == "trained":
                self.assertTrue(got is True, "rank %d: FSDP parameters differ from gloo's (%s)" % (r, why))
            else:
                # torch refused FSDP under gloo: it must refuse under unilink the same way
                self.assertEqual(got, "failed", "rank %d: gloo failed (%s) but unilink did not" % (r, why))
                self.assertNotIn("unilink", why.lower(), "rank %d: the failure came from unilink: %s" % (r, why))
                print("rank %d: torch %s has no CPU FSDP: %s" % (r, torch.__version__, why))


if __name__ == "__main__":
    unittest.main()
