"""Loading libunilink and declaring its C signatures for ctypes (one place for both)."""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_int32, c_size_t,
                    c_ubyte, c_uint32, c_uint64, c_void_p)

UNIQUE_ID_BYTES = 256
WINDOW_SIGNALS = 64
CONFIG_UNDEF = -(2 ** 31)


class UniqueIdC(Structure):
    # c_ubyte, not c_char: the id holds NUL bytes and c_char arrays stop at the first one.
    _fields_ = [("internal", c_ubyte * UNIQUE_ID_BYTES)]


class ConfigC(Structure):
    _fields_ = [("struct_size", c_size_t), ("backend", c_char_p), ("timeout_ms", c_int32),
                ("check", c_int32), ("device", c_int32), ("blocking", c_int32),
                ("name", c_char_p)]


class BackendInfoC(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("description", c_char_p),
                ("available", c_int), ("reason", c_char * 256), ("features", c_uint32),
                ("collectives", c_uint32), ("dtypes", c_uint32), ("ops", c_uint32),
                ("reduce_dtypes", c_uint32), ("max_ranks", c_int), ("plugin", c_int),
                ("origin", c_char * 256), ("version", c_char * 64)]


class LinkInfoC(Structure):
    _fields_ = [("peer", c_int), ("kind", c_int), ("generation", c_int), ("lanes", c_int),
                ("bandwidth_gbps", c_double), ("latency_us", c_double), ("source", c_int),
                ("description", c_char * 96)]


class CallInfoC(Structure):
    _fields_ = [("struct_size", c_size_t), ("sequence", c_uint64), ("coll", c_int),
                ("backend", c_char * 32), ("algorithm", c_char * 32), ("path", c_char * 32),
                ("fallback", c_int), ("reason", c_char * 192), ("bytes", c_size_t),
                ("modeled_us", c_double), ("selection", c_char * 96)]


def _candidates():
    env = os.environ.get("UNILINK_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _paths  # written by CMake (build tree or install)
        libdir = os.path.join(here, _paths.LIBDIR) if _paths.RELATIVE else _paths.LIBDIR
        yield os.path.join(libdir, "libunilink.so.0")
    except ImportError:
        pass
    # Running from the source tree: python/ next to build/lib.
    yield os.path.join(here, "..", "..", "build", "lib", "libunilink.so.0")
    found = ctypes.util.find_library("unilink")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("unilink: cannot load libunilink; set UNILINK_LIBRARY. Tried: "
                      + "; ".join(tried))


lib = _load()

comm_t = c_void_p
stream_t = c_void_p
window_t = c_void_p
sz = c_size_t
szp = POINTER(c_size_t)
R = c_int  # ul_result_t

_SIGS = {
    "ul_result_name": (c_char_p, [c_int]),
    "ul_result_string": (c_char_p, [c_int]),
    "ul_dtype_size": (c_size_t, [c_int]),
    "ul_dtype_name": (c_char_p, [c_int]),
    "ul_op_name": (c_char_p, [c_int]),
    "ul_dtype_from_name": (R, [c_char_p, POINTER(c_int)]),
    "ul_op_from_name": (R, [c_char_p, POINTER(c_int)]),
    "ul_coll_name": (c_char_p, [c_int]),
    "ul_backend_count": (c_int, []),
    "ul_backend_get_info": (R, [c_int, POINTER(BackendInfoC)]),
    "ul_backend_query": (R, [c_char_p, POINTER(BackendInfoC)]),
    "ul_backend_auto": (c_char_p, []),
    "ul_get_unique_id": (R, [c_char_p, POINTER(UniqueIdC)]),
    "ul_comm_init_rank": (R, [POINTER(comm_t), POINTER(ConfigC), c_int, UniqueIdC, c_int]),
    "ul_comm_init_all": (R, [POINTER(comm_t), POINTER(ConfigC), c_int, POINTER(c_int)]),
    "ul_comm_split": (R, [comm_t, c_int, c_int, POINTER(comm_t), POINTER(ConfigC)]),
    "ul_comm_finalize": (R, [comm_t]),
    "ul_comm_destroy": (R, [comm_t]),
    "ul_comm_abort": (R, [comm_t]),
    "ul_comm_rank": (R, [comm_t, POINTER(c_int)]),
    "ul_comm_size": (R, [comm_t, POINTER(c_int)]),
    "ul_comm_backend": (R, [comm_t, POINTER(c_char_p)]),
    "ul_comm_device": (R, [comm_t, POINTER(c_int)]),
    "ul_comm_get_error": (R, [comm_t]),
    "ul_comm_revoke": (R, [comm_t]),
    "ul_comm_shrink": (R, [comm_t, POINTER(comm_t), POINTER(ConfigC)]),
    "ul_comm_failed_ranks": (R, [comm_t, POINTER(c_int), c_int, POINTER(c_int)]),
    "ul_comm_get_async_error": (R, [comm_t, POINTER(c_int)]),
    "ul_comm_last_error": (c_char_p, [comm_t]),
    "ul_last_error": (c_char_p, []),
    "ul_comm_topology": (R, [comm_t, POINTER(LinkInfoC), c_int]),
    "ul_comm_last_call": (R, [comm_t, POINTER(CallInfoC)]),
    "ul_stream_create": (R, [comm_t, POINTER(stream_t)]),
    "ul_stream_wrap_native": (R, [comm_t, c_void_p, POINTER(stream_t)]),
    "ul_stream_destroy": (R, [stream_t]),
    "ul_stream_synchronize": (R, [stream_t]),
    "ul_stream_query": (R, [stream_t]),
    "ul_allreduce": (R, [c_void_p, c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_broadcast": (R, [c_void_p, c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_reduce": (R, [c_void_p, c_void_p, sz, c_int, c_int, c_int, comm_t, stream_t]),
    "ul_allgather": (R, [c_void_p, c_void_p, sz, c_int, comm_t, stream_t]),
    "ul_reduce_scatter": (R, [c_void_p, c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_alltoall": (R, [c_void_p, c_void_p, sz, c_int, comm_t, stream_t]),
    "ul_alltoallv": (R, [c_void_p, szp, szp, c_void_p, szp, szp, c_int, comm_t, stream_t]),
    "ul_allgatherv": (R, [c_void_p, sz, c_void_p, szp, szp, c_int, comm_t, stream_t]),
    "ul_gather": (R, [c_void_p, c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_scatter": (R, [c_void_p, c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_barrier": (R, [comm_t, stream_t]),
    "ul_send": (R, [c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_recv": (R, [c_void_p, sz, c_int, c_int, comm_t, stream_t]),
    "ul_group_start": (R, []),
    "ul_group_end": (R, []),
    "ul_mem_alloc": (R, [comm_t, sz, POINTER(c_void_p)]),
    "ul_mem_free": (R, [comm_t, c_void_p]),
    "ul_mem_copy": (R, [c_void_p, c_void_p, sz, comm_t, stream_t]),
    "ul_mem_set": (R, [c_void_p, c_int, sz, comm_t, stream_t]),
    "ul_window_register": (R, [comm_t, c_void_p, sz, POINTER(window_t)]),
    "ul_window_deregister": (R, [window_t]),
    "ul_put": (R, [c_void_p, sz, c_int, window_t, sz, stream_t]),
    "ul_get": (R, [c_void_p, sz, c_int, window_t, sz, stream_t]),
    "ul_signal": (R, [c_int, window_t, c_int, stream_t]),
    "ul_wait_signal": (R, [window_t, c_int, c_uint64, stream_t]),
    "ul_launched_by_mpi": (c_int, []),
    "ul_bootstrap_mpi": (R, [c_char_p, POINTER(UniqueIdC), POINTER(c_int), POINTER(c_int)]),
    "ul_version_string": (c_char_p, []),
}

# Functions added in later library versions are bound when present (has() says which).
_present = set()
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name, None)
    if _f is None:
        continue
    _f.restype = _res
    _f.argtypes = _args
    _present.add(_name)


def has(name):
    return name in _present
