"""torch.distributed backend "unilink". Importing this module registers it:

    import unilink.torch
    torch.distributed.init_process_group("unilink", init_method="env://")

The process group is a C++ extension (unilink._C) so that torch's own C++ paths (DDP's
reducer and parameter checks) call it directly. The tensor's device picks the
communicator: CPU tensors go to `cpu_backend` (UNILINK_TORCH_CPU_BACKEND, default "auto":
host shared memory on one node, mpi under mpirun across nodes when chosen), CUDA tensors to
`device_backend` (UNILINK_TORCH_DEVICE_BACKEND, default "auto:device": nccl or cuda).
Timeouts: the group's timeout (init_process_group(timeout=...)) becomes unilink's
timeout_ms, unless UNILINK_TIMEOUT_MS is set.
"""
import os
from datetime import timedelta

import torch.distributed as dist

from . import _C
from .core import error_for

BACKEND = "unilink"
ProcessGroupUnilink = _C.ProcessGroupUnilink


def _timeout_ms(timeout):
    env = os.environ.get("UNILINK_TIMEOUT_MS")
    if env:
        return int(env)
    if isinstance(timeout, timedelta):
        return int(timeout.total_seconds() * 1000)
    return int(timeout) if timeout is not None else 300000


def create_process_group(store, rank, size, timeout):
    """The creator torch calls (Backend.register_backend): (store, rank, size, timeout)."""
    return ProcessGroupUnilink(store, rank, size, _timeout_ms(timeout),
                               os.environ.get("UNILINK_TORCH_CPU_BACKEND", "auto"),
                               os.environ.get("UNILINK_TORCH_DEVICE_BACKEND", "auto:device"))


def empty(shape, dtype=None, group=None):
    """A CPU tensor in memory the group's peers can map (ul_mem_alloc): collectives on it
    run zero-copy, about twice as fast for large messages as on ordinary tensors. Only
    collectives of `group` (default: the default group, which must be "unilink") gain;
    the memory is freed when the last view of the tensor goes."""
    import torch
    pg = group if group is not None else dist.group.WORLD
    if not isinstance(pg, ProcessGroupUnilink):
        raise TypeError("unilink.torch.empty needs a unilink process group")
    dtype = dtype or torch.float32
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = 1
    for d in shape:
        n *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    return pg.alloc_bytes(n * itemsize)[:n * itemsize].view(dtype).view(shape)


def mpi_env():
    """Under mpirun, set RANK/WORLD_SIZE/LOCAL_RANK (and MASTER_ADDR/PORT defaults) from the
    launcher so that init_method="env://" works. Returns (rank, world_size)."""
    pairs = [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
             ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK")]
    for r, s, l in pairs:
        if r in os.environ and s in os.environ:
            os.environ.setdefault("RANK", os.environ[r])
            os.environ.setdefault("WORLD_SIZE", os.environ[s])
            os.environ.setdefault("LOCAL_RANK", os.environ.get(l, "0"))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    raise RuntimeError("unilink.torch.mpi_env: not started by mpirun (no OMPI_/PMI_ variables)")


def as_unilink_error(exc):
    """Turn a RuntimeError raised by the backend ("unilink UL_ERR_TIMEOUT (-6) in ...: why")
    into the matching unilink.Error subclass; None if it is not one of ours."""
    msg = str(exc)
    i = msg.find("unilink UL_")
    if i < 0:
        return None
    try:
        code = int(msg[msg.index("(", i) + 1:msg.index(")", i)])
    except ValueError:
        return None
    return error_for(code, msg[i:].split("\n")[0])


def _register():
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_process_group)


_register()
