"""One DDP step and an all_reduce under `python3 -m unilink.run --nproc_per_node=2`
(env:// from the launcher). Gradients are exact: loss = sum(W x + b) with x = rank + 1
everywhere, so DDP's averaged dL/dW is the mean of 1 and 2 = 1.5 and dL/db = 1. Each rank
writes what it saw to $UNILINK_TEST_OUT/rank<N>.json; test_torch_run.py checks them."""
import json
import os
import warnings

import torch
import torch.distributed as dist

import unilink.torch  # noqa: F401

warnings.simplefilter("ignore")
dist.init_process_group("unilink")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
model(torch.full((3, 4), float(rank + 1))).sum().backward()
w, b = model.module.weight.grad, model.module.bias.grad
t = torch.arange(5, dtype=torch.int64) + 10 * rank
dist.all_reduce(t)
out = {"rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
       "backend": dist.get_backend(),
       "w_grad_ok": torch.equal(w, torch.full_like(w, 3 * 1.5)),
       "b_grad_ok": torch.equal(b, torch.full_like(b, 3.0)),
       "all_reduce": t.tolist()}
dist.destroy_process_group()
with open(os.path.join(os.environ["UNILINK_TEST_OUT"], "rank%d.json" % rank), "w") as f:
    json.dump(out, f)
