"""Run under mpirun -np 2: backend "unilink" on the mpi backend (UNILINK_TORCH_CPU_BACKEND=mpi)
and on the default host backend, all_reduce checked and a DDP step. Exit 0 on success."""
import os
import sys

import torch
import torch.distributed as dist

import unilink
import unilink.torch

rank, size = unilink.torch.mpi_env()
dist.init_process_group("unilink")
t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
want = float(size * (size + 1) // 2)
comm = unilink.Comm(dict(dist.group.WORLD.comms())["cpu"])
expect = os.environ.get("UNILINK_TORCH_CPU_BACKEND", "auto")
if expect == "auto":
    expect = unilink.core.lib.ul_backend_auto().decode()
ok = torch.equal(t, torch.full((5,), want)) and comm.backend == expect
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
model(torch.ones(2, 4)).sum().backward()
dist.destroy_process_group()
print("rank %d: backend %s all_reduce %s" % (rank, comm.backend, "ok" if ok else t.tolist()))
sys.exit(0 if ok else 1)
