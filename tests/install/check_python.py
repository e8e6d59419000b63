"""Run by check_install.cmake with PYTHONPATH=<prefix>/<python dir> and a clean
environment: the installed package imports from the prefix, loads the prefix's libunilink,
and a 1-rank host all_reduce runs (through torch.distributed too when the torch extension
was installed). Prints "python ok" on success; any failure raises."""
import array
import os
import sys
import tempfile

prefix = os.path.realpath(sys.argv[1])


def inside(path):
    return os.path.realpath(path).startswith(prefix + os.sep)


import unilink  # noqa: E402

assert inside(unilink.__file__), "unilink imported from %s, not %s" % (unilink.__file__, prefix)
uid = unilink.UniqueId.create("host")
with unilink.Comm.init_rank(1, uid.bytes, 0, timeout_ms=10000) as comm:
    x = array.array("f", [1.5 * i for i in range(8)])
    comm.allreduce(x, op="sum")
    assert list(x) == [1.5 * i for i in range(8)], list(x)
    assert comm.last_call().backend == "host", comm.last_call()
done = ["ctypes all_reduce"]

pkg = os.path.dirname(unilink.__file__)
if any(f.startswith("_C.") and f.endswith(".so") for f in os.listdir(pkg)):
    import torch
    import torch.distributed as dist
    import unilink.torch  # noqa: F401

    assert inside(unilink._C.__file__), unilink._C.__file__
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("unilink", init_method="file://" + os.path.join(d, "store"),
                                rank=0, world_size=1)
        t = torch.arange(6, dtype=torch.int64)
        dist.all_reduce(t)
        assert t.tolist() == list(range(6)), t
        dist.destroy_process_group()
    done.append("torch.distributed all_reduce")

# Every libunilink this process mapped is the prefix's, not the build tree's.
with open("/proc/self/maps") as f:
    libs = {l.split()[-1] for l in f if "libunilink" in l}
outside = [l for l in libs if not inside(l)]
assert libs and not outside, "libunilink mapped from outside %s: %s" % (prefix, outside)
print("python ok: %s from %s" % (", ".join(done), pkg))
