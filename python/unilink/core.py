"""unilink's C API as Python objects: communicators, streams, windows, collectives.

Buffers are anything with a data pointer: numpy arrays, torch tensors, objects with
__cuda_array_interface__ or __dlpack__, or the buffer protocol (bytearray, memoryview).
Element counts come from the buffer's size unless given; the dtype from the buffer
unless given (dtype="bf16", a torch/numpy dtype, or a DType).
"""
import ctypes
import threading
import enum
from collections import namedtuple
from ctypes import byref, c_char_p, c_int, c_size_t, c_void_p

from . import _lib
from ._lib import lib


# --- errors ----------------------------------------------------------------
class Error(RuntimeError):
    """A unilink call failed: .code (int), .name ("UL_ERR_TIMEOUT"), .sentence (why)."""

    def __init__(self, code, sentence="", call=""):
        self.code = int(code)
        self.name = lib.ul_result_name(self.code).decode()
        self.sentence = sentence or lib.ul_result_string(self.code).decode()
        self.call = call
        super().__init__("%s (%d)%s: %s" % (self.name, self.code,
                                            " in " + call if call else "", self.sentence))


class InvalidArgument(Error, ValueError):
    pass


class Unsupported(Error, NotImplementedError):
    pass


class Unavailable(Error):
    pass


class Timeout(Error, TimeoutError):
    pass


class PeerLost(Error, ConnectionError):
    pass


class Aborted(Error):
    pass


class Mismatch(Error):
    pass


class Revoked(Error):
    """The communicator was revoked (Comm.revoke on some rank): shrink() or destroy() it."""


_ERRORS = {-1: InvalidArgument, -3: Unsupported, -4: Unavailable, -6: Timeout, -7: PeerLost,
           -8: Aborted, -9: Mismatch, -15: Revoked}

# UL_IN_PROGRESS: nonblocking mode's "not done yet" (not an error; Comm.async_error()).
IN_PROGRESS = 1


def error_for(code, sentence="", call=""):
    return _ERRORS.get(int(code), Error)(code, sentence, call)


def _check(rc, comm=None, call=""):
    if rc != 0 and rc != 1:
        s = lib.ul_comm_last_error(comm) if comm else lib.ul_last_error()
        raise error_for(rc, (s or b"").decode(errors="replace"), call)
    return rc


# --- dtypes and ops ------------------------------------------------------------
class DType(enum.IntEnum):
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FP16 = 6
    BF16 = 7
    FP32 = 8
    FP64 = 9
    FP8_E4M3 = 10
    FP8_E5M2 = 11

    @property
    def itemsize(self):
        return lib.ul_dtype_size(int(self))


class Op(enum.IntEnum):
    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


_NUMPY_NAMES = {"int8": DType.INT8, "uint8": DType.UINT8, "int32": DType.INT32,
                "uint32": DType.UINT32, "int64": DType.INT64, "uint64": DType.UINT64,
                "float16": DType.FP16, "float32": DType.FP32, "float64": DType.FP64,
                "bool": DType.UINT8, "bfloat16": DType.BF16}
# torch dtype name -> DType; fp8 names where the torch version has them.
_TORCH_NAMES = {"int8": DType.INT8, "uint8": DType.UINT8, "int32": DType.INT32,
                "int64": DType.INT64, "float16": DType.FP16, "bfloat16": DType.BF16,
                "float32": DType.FP32, "float64": DType.FP64, "bool": DType.UINT8,
                "uint32": DType.UINT32, "uint64": DType.UINT64,
                "float8_e4m3fn": DType.FP8_E4M3, "float8_e5m2": DType.FP8_E5M2}
_TYPESTR = {"i1": DType.INT8, "u1": DType.UINT8, "i4": DType.INT32, "u4": DType.UINT32,
            "i8": DType.INT64, "u8": DType.UINT64, "f2": DType.FP16, "f4": DType.FP32,
            "f8": DType.FP64, "b1": DType.UINT8}
_FORMAT = {"b": DType.INT8, "B": DType.UINT8, "i": DType.INT32, "I": DType.UINT32,
           "l": DType.INT64, "L": DType.UINT64, "q": DType.INT64, "Q": DType.UINT64,
           "e": DType.FP16, "f": DType.FP32, "d": DType.FP64, "c": DType.UINT8, "?": DType.UINT8}


def as_dtype(d):
    """DType from a DType, int, unilink/nccl name ("bf16", "float"), numpy or torch dtype."""
    if d is None:
        return None
    if isinstance(d, DType):
        return d
    if isinstance(d, int):
        return DType(d)
    if isinstance(d, str):
        v = c_int()
        _check(lib.ul_dtype_from_name(d.encode(), byref(v)), call="dtype " + d)
        return DType(v.value)
    s = str(d)
    if s.startswith("torch."):
        name = s[len("torch."):]
        if name in _TORCH_NAMES:
            return _TORCH_NAMES[name]
    name = getattr(d, "name", None) or s
    if name in _NUMPY_NAMES:
        return _NUMPY_NAMES[name]
    try:  # numpy scalar types (np.float64) and dtype strings ("<f4")
        import numpy
        name = numpy.dtype(d).name
        if name in _NUMPY_NAMES:
            return _NUMPY_NAMES[name]
    except (TypeError, ImportError):
        pass
    raise InvalidArgument(-1, "no unilink dtype for %r" % (d,))


def as_op(op):
    if isinstance(op, Op):
        return op
    if isinstance(op, int):
        return Op(op)
    v = c_int()
    _check(lib.ul_op_from_name(str(op).encode(), byref(v)), call="op %s" % op)
    return Op(v.value)


# --- buffers ----------------------------------------------------------------
Buffer = namedtuple("Buffer", "ptr nbytes dtype device keep")


# Calls inside `with unilink.group()` run at its end (ul_group_end), so every buffer they
# name must live until then, even a temporary (`c.send(np.full(3, r), peer)`): the open
# groups of this thread hold them.
_groups = threading.local()


def buffer(obj, dtype=None):
    """(pointer, bytes, dtype, device) of a buffer object. device is -1 for host memory.
    Inside an open group the object is kept alive until the group ends."""
    b = _to_buffer(obj, dtype)
    if obj is not None:
        held = getattr(_groups, "held", None)
        if held is not None:
            held.append((obj, b.keep))
        # the call being prepared may go on a stream: _stream() takes these
        pending = getattr(_groups, "pending", None)
        if pending is None:
            pending = _groups.pending = []
        pending.append((obj, b.keep))
    return b


def _to_buffer(obj, dtype=None):
    if obj is None:
        return Buffer(None, 0, as_dtype(dtype), -1, None)
    if isinstance(obj, Buffer):
        return obj
    mod = type(obj).__module__
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):
        if not obj.is_contiguous():
            raise InvalidArgument(-1, "tensor is not contiguous")
        dev = obj.device.index if obj.device.type != "cpu" else -1
        if obj.device.type != "cpu" and dev is None:
            dev = 0
        return Buffer(obj.data_ptr() or None, obj.numel() * obj.element_size(),
                      as_dtype(dtype) or as_dtype(obj.dtype), dev, obj)
    if hasattr(obj, "__array_interface__") and hasattr(obj, "ctypes"):  # numpy
        if not obj.flags["C_CONTIGUOUS"]:
            raise InvalidArgument(-1, "array is not C-contiguous")
        return Buffer(obj.ctypes.data or None, obj.nbytes, as_dtype(dtype) or as_dtype(obj.dtype),
                      -1, obj)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        if cai.get("strides") is not None:
            raise InvalidArgument(-1, "__cuda_array_interface__ with strides is not supported")
        n = 1
        for s in cai["shape"]:
            n *= s
        dt = as_dtype(dtype) or _TYPESTR.get(cai["typestr"][1:])
        return Buffer(cai["data"][0] or None, n * (dt.itemsize if dt else 1), dt, 0, obj)
    if hasattr(obj, "__dlpack__"):
        import torch.utils.dlpack
        return _to_buffer(torch.utils.dlpack.from_dlpack(obj), dtype)
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise InvalidArgument(-1, "buffer is not contiguous")
    if mv.readonly:
        import numpy
        arr = numpy.frombuffer(mv, dtype=numpy.uint8)
        ptr = arr.ctypes.data
    else:
        ptr = ctypes.addressof((ctypes.c_char * mv.nbytes).from_buffer(mv)) if mv.nbytes else None
    return Buffer(ptr, mv.nbytes, as_dtype(dtype) or _FORMAT.get(mv.format.lstrip("@=<")), -1, mv)


def _need_dtype(*bufs):
    for b in bufs:
        if b.dtype is not None:
            return b.dtype
    raise InvalidArgument(-1, "cannot tell the dtype of the buffer; pass dtype=")


def _stream(s):
    """The stream argument of a call. Work queued on a Stream runs later, on the
    stream's own thread: the buffers this call named are held by the Stream until it is
    synchronized (or found idle by query)."""
    pending = getattr(_groups, "pending", None)
    _groups.pending = None
    if isinstance(s, Stream):
        if pending:
            s._held.extend(pending)
        return s.handle
    return s


def _sizes(seq):
    return (c_size_t * len(seq))(*seq)


# --- introspection objects ------------------------------------------------------
LinkKind = enum.IntEnum("LinkKind", "SELF NVLINK PCIE SHM NETWORK MODELED XELINK UNKNOWN", start=0)
LinkSource = enum.IntEnum("LinkSource", "NONE MEASURED DRIVER MODELED NOMINAL", start=0)
Link = namedtuple("Link", "peer kind generation lanes bandwidth_gbps latency_us source description")
CallInfo = namedtuple("CallInfo", "sequence coll backend algorithm path fallback reason bytes "
                                  "modeled_us selection")
BackendInfo = namedtuple("BackendInfo", "name description available reason features collectives "
                                        "dtypes ops reduce_dtypes max_ranks plugin origin version")


def _backend_info(c):
    d = lambda v: v.decode(errors="replace") if v else ""
    return BackendInfo(d(c.name), d(c.description), bool(c.available), d(c.reason), c.features,
                       c.collectives, c.dtypes, c.ops, c.reduce_dtypes, c.max_ranks,
                       bool(c.plugin), d(c.origin), d(c.version))


def backends():
    """Every registered backend, available or not (and why)."""
    out = []
    for i in range(lib.ul_backend_count()):
        info = _lib.BackendInfoC(struct_size=ctypes.sizeof(_lib.BackendInfoC))
        _check(lib.ul_backend_get_info(i, byref(info)), call="ul_backend_get_info")
        out.append(_backend_info(info))
    return out


def backend_info(name):
    info = _lib.BackendInfoC(struct_size=ctypes.sizeof(_lib.BackendInfoC))
    _check(lib.ul_backend_query(name.encode(), byref(info)), call="ul_backend_query")
    return _backend_info(info)


def version():
    return lib.ul_version_string().decode()


def launched_by_mpi():
    return bool(lib.ul_launched_by_mpi())


# --- unique ids and configuration ----------------------------------------------------
class UniqueId:
    """The 256-byte bootstrap blob. .bytes is exact (NUL bytes included)."""
    __slots__ = ("_c",)

    def __init__(self, data=None):
        self._c = _lib.UniqueIdC()
        if data is not None:
            data = bytes(data)
            if len(data) != _lib.UNIQUE_ID_BYTES:
                raise InvalidArgument(-1, "a unique id is %d bytes, got %d"
                                      % (_lib.UNIQUE_ID_BYTES, len(data)))
            ctypes.memmove(ctypes.addressof(self._c), data, len(data))

    @classmethod
    def create(cls, backend=None):
        uid = cls()
        _check(lib.ul_get_unique_id(backend.encode() if backend else None, byref(uid._c)),
               call="ul_get_unique_id")
        return uid

    @property
    def bytes(self):
        # string_at copies all 256 bytes; bytes() of a c_char array would stop at a NUL.
        return ctypes.string_at(ctypes.addressof(self._c), _lib.UNIQUE_ID_BYTES)


def bootstrap_mpi(backend=None):
    """Under mpirun: (UniqueId, rank, nranks), the id shared over MPI by rank 0."""
    uid, rank, n = UniqueId(), c_int(), c_int()
    _check(lib.ul_bootstrap_mpi(backend.encode() if backend else None, byref(uid._c),
                                byref(rank), byref(n)), call="ul_bootstrap_mpi")
    return uid, rank.value, n.value


def _config(backend=None, timeout_ms=None, check=None, device=None, name=None, blocking=None):
    u = _lib.CONFIG_UNDEF
    cfg = _lib.ConfigC(ctypes.sizeof(_lib.ConfigC), backend.encode() if backend else None,
                       u if timeout_ms is None else int(timeout_ms),
                       u if check is None else int(bool(check)), u if device is None else device,
                       u if blocking is None else int(bool(blocking)),
                       name.encode() if name else None)
    return cfg


# --- communicators ------------------------------------------------------------------
class Comm:
    """A unilink communicator. Use as a context manager or call destroy()."""

    def __init__(self, handle, rank=None, size=None):
        self.handle = c_void_p(handle) if not isinstance(handle, c_void_p) else handle
        if rank is not None and size is not None:
            # init_rank knows them; a nonblocking communicator refuses queries until ready
            self.rank, self.size = rank, size
            return
        r, s = c_int(), c_int()
        self._call(lib.ul_comm_rank, "ul_comm_rank", self.handle, byref(r))
        self._call(lib.ul_comm_size, "ul_comm_size", self.handle, byref(s))
        self.rank, self.size = r.value, s.value

    @classmethod
    def init_rank(cls, nranks, uid, rank, **config):
        """Join communicator `uid` (a UniqueId or its bytes) as `rank` of `nranks`.
        config: backend, timeout_ms, check, device, name, blocking (ul_config_t fields).
        blocking=False returns at once while the communicator is created in the background
        and makes stream-less calls queue: poll async_error() or call wait_async()."""
        if not isinstance(uid, UniqueId):
            uid = UniqueId(uid)
        h = c_void_p()
        cfg = _config(**config)
        _check(lib.ul_comm_init_rank(byref(h), byref(cfg), nranks, uid._c, rank),
               call="ul_comm_init_rank")
        return cls(h, rank, nranks)

    @classmethod
    def init_all(cls, ndev, devices=None, **config):
        """ndev communicators driven by this process, one per device."""
        hs = (c_void_p * ndev)()
        dl = (c_int * ndev)(*devices) if devices is not None else None
        cfg = _config(**config)
        _check(lib.ul_comm_init_all(hs, byref(cfg), ndev, dl), call="ul_comm_init_all")
        return [cls(c_void_p(h)) for h in hs]

    def _call(self, fn, name, *args):
        return _check(fn(*args), self.handle, name)

    def split(self, color, key=0, **config):
        """Collective: a new Comm of the ranks with the same color (None for NOCOLOR)."""
        h = c_void_p()
        cfg = byref(_config(**config)) if config else None
        self._call(lib.ul_comm_split, "ul_comm_split", self.handle,
                   -1 if color is None else color, key, byref(h), cfg)
        return Comm(h) if h.value else None

    def finalize(self):
        self._call(lib.ul_comm_finalize, "ul_comm_finalize", self.handle)

    def destroy(self):
        if self.handle:
            h, self.handle = self.handle, None
            _check(lib.ul_comm_destroy(h), None, "ul_comm_destroy")

    def abort(self):
        if self.handle:
            h, self.handle = self.handle, None
            _check(lib.ul_comm_abort(h), None, "ul_comm_abort")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    @property
    def backend(self):
        p = c_char_p()
        self._call(lib.ul_comm_backend, "ul_comm_backend", self.handle, byref(p))
        return p.value.decode()

    @property
    def device(self):
        d = c_int()
        self._call(lib.ul_comm_device, "ul_comm_device", self.handle, byref(d))
        return d.value

    @property
    def error(self):
        """The sticky error as an Error, or None."""
        rc = lib.ul_comm_get_error(self.handle)
        return error_for(rc, lib.ul_comm_last_error(self.handle).decode()) if rc else None

    # --- recovery after a lost rank, nonblocking progress (ULFM / ncclCommShrink style) ---
    def revoke(self):
        """Revoke this communicator on every rank: current and later operations on it raise
        Revoked there (sticky). Does not block; idempotent. shrink(), failed_ranks(),
        abort(), destroy() and the queries still work on a revoked communicator."""
        self._call(lib.ul_comm_revoke, "ul_comm_revoke", self.handle)

    def shrink(self, **config):
        """Collective over the survivors: a new Comm of exactly the ranks not lost,
        renumbered in old-rank order (old 0,2,3 alive -> new 0,1,2). Works on a revoked or
        failed communicator; this one stays as it is (destroy it afterwards). config as in
        init_rank; none given inherits this communicator's configuration."""
        h = c_void_p()
        cfg = byref(_config(**config)) if config else None
        self._call(lib.ul_comm_shrink, "ul_comm_shrink", self.handle, byref(h), cfg)
        return Comm(h)

    def failed_ranks(self):
        """The ranks this rank knows to be lost, ascending. Local, does not block."""
        n = max(self.size, 1)
        ranks, count = (c_int * n)(), c_int()
        self._call(lib.ul_comm_failed_ranks, "ul_comm_failed_ranks", self.handle, ranks, n,
                   byref(count))
        return list(ranks[:min(count.value, n)])

    def async_error(self):
        """Progress and errors of a nonblocking communicator, without blocking
        (ul_comm_get_async_error): IN_PROGRESS while it is being created or queued work is
        pending, else the first error as an Error (returned, not raised), else None."""
        st = c_int()
        self._call(lib.ul_comm_get_async_error, "ul_comm_get_async_error", self.handle,
                   byref(st))
        if st.value == 0:
            return None
        if st.value == IN_PROGRESS:
            return IN_PROGRESS
        return error_for(st.value, self.last_error, "ul_comm_get_async_error")

    def wait_async(self, timeout_s=None, poll_s=0.001):
        """Poll async_error() until nothing is pending; raise its error if there is one.
        Raises Timeout after timeout_s with the work still pending (it does not abort:
        call abort() for that)."""
        import time
        t0 = time.monotonic()
        while True:
            st = self.async_error()
            if st is None:
                return
            if isinstance(st, Error):
                raise st
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                raise Timeout(-6, "work still in progress after %gs" % timeout_s,
                              "Comm.wait_async")
            time.sleep(poll_s)

    @property
    def last_error(self):
        return lib.ul_comm_last_error(self.handle).decode(errors="replace")

    def topology(self):
        links = (_lib.LinkInfoC * self.size)()
        self._call(lib.ul_comm_topology, "ul_comm_topology", self.handle, links, self.size)
        return [Link(l.peer, LinkKind(l.kind), l.generation, l.lanes, l.bandwidth_gbps,
                     l.latency_us, LinkSource(l.source), l.description.decode()) for l in links]

    def last_call(self):
        c = _lib.CallInfoC(struct_size=ctypes.sizeof(_lib.CallInfoC))
        self._call(lib.ul_comm_last_call, "ul_comm_last_call", self.handle, byref(c))
        return CallInfo(c.sequence, lib.ul_coll_name(c.coll).decode(), c.backend.decode(),
                        c.algorithm.decode(), c.path.decode(), bool(c.fallback),
                        c.reason.decode(), c.bytes, c.modeled_us, c.selection.decode())

    def stream(self, native=None):
        return Stream(self, native)

    # --- collectives. recvbuf None = in place (the send buffer is the result). ---
    def _count(self, b, dt, count, div=1):
        if count is not None:
            return count
        return b.nbytes // dt.itemsize // div

    def allreduce(self, sendbuf, recvbuf=None, op="sum", count=None, dtype=None, stream=None):
        s = buffer(sendbuf, dtype)
        r = buffer(recvbuf, dtype) if recvbuf is not None else s
        dt = _need_dtype(s, r)
        self._call(lib.ul_allreduce, "ul_allreduce", s.ptr, r.ptr, self._count(s, dt, count),
                   dt, as_op(op), self.handle, _stream(stream))
        return r.keep

    def broadcast(self, buf, recvbuf=None, root=0, count=None, dtype=None, stream=None):
        s = buffer(buf, dtype)
        r = buffer(recvbuf, dtype) if recvbuf is not None else s
        dt = _need_dtype(s, r)
        self._call(lib.ul_broadcast, "ul_broadcast", s.ptr, r.ptr, self._count(r, dt, count),
                   dt, root, self.handle, _stream(stream))
        return r.keep

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, count=None, dtype=None,
               stream=None):
        s = buffer(sendbuf, dtype)
        r = buffer(recvbuf, dtype) if recvbuf is not None else s
        dt = _need_dtype(s, r)
        self._call(lib.ul_reduce, "ul_reduce", s.ptr, r.ptr, self._count(s, dt, count), dt,
                   as_op(op), root, self.handle, _stream(stream))
        return r.keep

    def allgather(self, sendbuf, recvbuf, count=None, dtype=None, stream=None):
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        self._call(lib.ul_allgather, "ul_allgather", s.ptr, r.ptr,
                   self._count(r, dt, count, self.size), dt, self.handle, _stream(stream))
        return r.keep

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", count=None, dtype=None, stream=None):
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        self._call(lib.ul_reduce_scatter, "ul_reduce_scatter", s.ptr, r.ptr,
                   self._count(r, dt, count), dt, as_op(op), self.handle, _stream(stream))
        return r.keep

    def alltoall(self, sendbuf, recvbuf, count=None, dtype=None, stream=None):
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        self._call(lib.ul_alltoall, "ul_alltoall", s.ptr, r.ptr,
                   self._count(s, dt, count, self.size), dt, self.handle, _stream(stream))
        return r.keep

    def alltoallv(self, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype=None,
                  stream=None):
        """Counts and displacements in elements, one per rank (MPI_Alltoallv)."""
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        self._call(lib.ul_alltoallv, "ul_alltoallv", s.ptr, _sizes(sendcounts), _sizes(sdispls),
                   r.ptr, _sizes(recvcounts), _sizes(rdispls), dt, self.handle, _stream(stream))
        return r.keep

    def allgatherv(self, sendbuf, recvbuf, recvcounts, displs=None, count=None, dtype=None,
                   stream=None):
        """Rank j's elements land at recvbuf + displs[j] (packed in rank order by default)."""
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        if displs is None:
            displs = [sum(recvcounts[:j]) for j in range(len(recvcounts))]
        n = recvcounts[self.rank] if count is None else count
        self._call(lib.ul_allgatherv, "ul_allgatherv", s.ptr, n, r.ptr, _sizes(recvcounts),
                   _sizes(displs), dt, self.handle, _stream(stream))
        return r.keep

    def gather(self, sendbuf, recvbuf=None, root=0, count=None, dtype=None, stream=None):
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(s, r)
        self._call(lib.ul_gather, "ul_gather", s.ptr, r.ptr, self._count(s, dt, count), dt,
                   root, self.handle, _stream(stream))
        return r.keep

    def scatter(self, sendbuf, recvbuf, root=0, count=None, dtype=None, stream=None):
        s, r = buffer(sendbuf, dtype), buffer(recvbuf, dtype)
        dt = _need_dtype(r, s)
        self._call(lib.ul_scatter, "ul_scatter", s.ptr, r.ptr, self._count(r, dt, count), dt,
                   root, self.handle, _stream(stream))
        return r.keep

    def barrier(self, stream=None):
        self._call(lib.ul_barrier, "ul_barrier", self.handle, _stream(stream))

    # --- point to point ---
    def send(self, buf, peer, count=None, dtype=None, stream=None):
        b = buffer(buf, dtype)
        dt = _need_dtype(b)
        self._call(lib.ul_send, "ul_send", b.ptr, self._count(b, dt, count), dt, peer,
                   self.handle, _stream(stream))

    def recv(self, buf, peer, count=None, dtype=None, stream=None):
        b = buffer(buf, dtype)
        dt = _need_dtype(b)
        self._call(lib.ul_recv, "ul_recv", b.ptr, self._count(b, dt, count), dt, peer,
                   self.handle, _stream(stream))
        return b.keep

    # --- memory and one-sided ---
    def mem_alloc(self, nbytes):
        return Memory(self, nbytes)

    def window(self, mem, nbytes=None):
        return Window(self, mem, nbytes)


class group:
    """`with unilink.group(): comm.send(...); comm.recv(...)` fuses them (ul_group_start/end)."""

    def __enter__(self):
        _check(lib.ul_group_start(), call="ul_group_start")
        _groups.depth = getattr(_groups, "depth", 0) + 1
        if _groups.depth == 1:
            _groups.held = []
        return self

    def __exit__(self, et, ev, tb):
        try:
            rc = lib.ul_group_end()
        finally:
            _groups.depth -= 1
            if _groups.depth == 0:
                _groups.held = None  # the outermost end ran every fused call
        if et is None:
            _check(rc, call="ul_group_end")


class Stream:
    def __init__(self, comm, native=None):
        self.comm = comm
        self._held = []  # buffers of queued calls, alive until the stream drains
        self.handle = c_void_p()
        if native is None:
            comm._call(lib.ul_stream_create, "ul_stream_create", comm.handle, byref(self.handle))
        else:
            comm._call(lib.ul_stream_wrap_native, "ul_stream_wrap_native", comm.handle,
                       c_void_p(int(native)), byref(self.handle))

    def synchronize(self):
        _check(lib.ul_stream_synchronize(self.handle), self.comm.handle, "ul_stream_synchronize")
        self._held = []

    def query(self):
        """True when all work completed (raises the first error)."""
        done = _check(lib.ul_stream_query(self.handle), self.comm.handle, "ul_stream_query") == 0
        if done:
            self._held = []
        return done

    def destroy(self):
        """Queued work still names Python buffers this object keeps alive, so a busy
        stream is drained first (the C call would let it finish in the background)."""
        if self.handle:
            if self._held:
                lib.ul_stream_synchronize(self.handle)  # its error stays on the communicator
            h, self.handle = self.handle, None
            self._held = []
            _check(lib.ul_stream_destroy(h), None, "ul_stream_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()


class Memory:
    """Memory peers can share (ul_mem_alloc). .numpy(dtype) views it on host backends."""

    def __init__(self, comm, nbytes):
        self.comm, self.nbytes, self.ptr = comm, nbytes, c_void_p()
        comm._call(lib.ul_mem_alloc, "ul_mem_alloc", comm.handle, nbytes, byref(self.ptr))

    def numpy(self, dtype="uint8"):
        import numpy
        raw = (ctypes.c_char * self.nbytes).from_address(self.ptr.value)
        return numpy.frombuffer(raw, dtype=dtype)

    def as_buffer(self, dtype=None):
        return Buffer(self.ptr.value, self.nbytes, as_dtype(dtype), self.comm.device, self)

    def free(self):
        if self.ptr:
            p, self.ptr = self.ptr, c_void_p()
            self.comm._call(lib.ul_mem_free, "ul_mem_free", self.comm.handle, p)


class Window:
    """Collectively registered memory for put/get/signal (ul_window_register)."""

    def __init__(self, comm, mem, nbytes=None):
        b = mem.as_buffer() if isinstance(mem, Memory) else buffer(mem)
        self.comm, self.keep, self.handle = comm, mem, c_void_p()
        comm._call(lib.ul_window_register, "ul_window_register", comm.handle, b.ptr,
                   nbytes or b.nbytes, byref(self.handle))

    def put(self, src, peer, offset=0, nbytes=None, stream=None):
        b = buffer(src)
        self.comm._call(lib.ul_put, "ul_put", b.ptr, nbytes or b.nbytes, peer, self.handle,
                        offset, _stream(stream))

    def get(self, dst, peer, offset=0, nbytes=None, stream=None):
        b = buffer(dst)
        self.comm._call(lib.ul_get, "ul_get", b.ptr, nbytes or b.nbytes, peer, self.handle,
                        offset, _stream(stream))
        return b.keep

    def signal(self, peer, index=0, stream=None):
        self.comm._call(lib.ul_signal, "ul_signal", peer, self.handle, index, _stream(stream))

    def wait_signal(self, index, value, stream=None):
        self.comm._call(lib.ul_wait_signal, "ul_wait_signal", self.handle, index, value,
                        _stream(stream))

    def deregister(self):
        if self.handle:
            h, self.handle = self.handle, None
            self.comm._call(lib.ul_window_deregister, "ul_window_deregister", h)
