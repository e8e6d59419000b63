"""unilink for Python: communicators, collectives, point to point and one-sided
operations over libunilink (ctypes). `import unilink.torch` registers the
torch.distributed backend "unilink". See docs/python.md."""
from .core import (IN_PROGRESS, Aborted, BackendInfo, Buffer, CallInfo, Comm, DType, Error,
                   InvalidArgument, Link, LinkKind, LinkSource, Memory, Mismatch, Op, PeerLost,
                   Revoked, Stream, Timeout, Unavailable, Unsupported, UniqueId, Window, as_dtype,
                   as_op, backend_info, backends, bootstrap_mpi, buffer, error_for, group,
                   launched_by_mpi, version)
from ._lib import has

__all__ = [n for n in dir() if not n.startswith("_")]
