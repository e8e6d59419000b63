"""The ctypes layer (unilink.Comm): ranks as threads of this process on the host
backend (ctypes releases the GIL during calls, so thread ranks run concurrently)."""
import threading
import time
import unittest

import numpy as np

import unilink


def on_threads(n, fn, backend="host", timeout_ms=20000):
    uid = unilink.UniqueId.create(backend)
    out, errs = [None] * n, []

    def rank_main(r):
        try:
            with unilink.Comm.init_rank(n, uid.bytes, r, timeout_ms=timeout_ms) as c:
                out[r] = fn(c)
        except BaseException as e:  # noqa: B902 - reported below
            errs.append((r, e))

    ts = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errs:
        raise errs[0][1]
    return out


class UniqueIdTest(unittest.TestCase):
    def test_bytes_keep_nul_bytes(self):
        uid = unilink.UniqueId.create("host")
        b = uid.bytes
        self.assertEqual(len(b), 256)
        self.assertIn(0, b)
        self.assertEqual(unilink.UniqueId(b).bytes, b)
        with self.assertRaises(unilink.InvalidArgument):
            unilink.UniqueId(b[:10])

    def test_unknown_backend_raises_with_code_and_sentence(self):
        with self.assertRaises(unilink.Error) as cm:
            unilink.UniqueId.create("no-such-backend")
        self.assertEqual(cm.exception.name, "UL_ERR_NOT_FOUND")
        self.assertEqual(cm.exception.code, -13)
        self.assertTrue(cm.exception.sentence)


class Collectives(unittest.TestCase):
    def test_collectives_numpy(self):
        n = 3

        def body(c):
            r, res = c.rank, {}
            x = np.arange(6, dtype=np.float32) + r
            res["allreduce"] = c.allreduce(x.copy(), op="sum")
            y = np.zeros(6, dtype=np.float32)
            c.allreduce(x, y, op=unilink.Op.MAX)
            res["max"] = y
            res["bcast"] = c.broadcast(np.full(4, r, dtype=np.int64), root=2)
            res["allgather"] = c.allgather(np.full(2, r, np.int32), np.zeros(2 * n, np.int32))
            res["rs"] = c.reduce_scatter(np.ones(2 * n, np.float64), np.zeros(2, np.float64))
            res["a2a"] = c.alltoall(np.arange(n, dtype=np.int32) + 10 * r, np.zeros(n, np.int32))
            sc = [j + 1 for j in range(n)]          # rank r sends j+1 elements to rank j
            rc = [r + 1] * n
            send = np.concatenate([np.full(j + 1, 10 * r + j, np.int32) for j in range(n)])
            res["a2av"] = c.alltoallv(send, sc, np.cumsum([0] + sc[:-1]).tolist(),
                                      np.zeros(sum(rc), np.int32), rc,
                                      np.cumsum([0] + rc[:-1]).tolist())
            counts = [j + 1 for j in range(n)]
            res["agv"] = c.allgatherv(np.full(r + 1, r, np.uint8), np.zeros(sum(counts), np.uint8),
                                      counts)
            g = np.zeros(2 * n, np.float32) if r == 0 else None
            c.gather(np.full(2, r, np.float32), g, root=0)
            res["gather"] = g
            res["scatter"] = c.scatter(np.arange(2 * n, dtype=np.float32) if r == 1 else None,
                                       np.zeros(2, np.float32), root=1)
            buf = bytearray(24)
            res["bf16"] = c.allreduce(np.ones(4, np.uint16) * 0x3F80, dtype="bf16")  # 1.0
            c.barrier()
            with unilink.group():
                c.send(np.full(3, r, np.int64), (r + 1) % n)
                c.recv(buf, (r - 1) % n, count=3, dtype="int64")  # buffer protocol
            res["ring"] = np.frombuffer(bytes(buf), np.int64)[0]
            res["last"] = c.last_call()
            res["topo"] = c.topology()
            sub = c.split(r % 2, key=r)
            res["split"] = (sub.rank, sub.size)
            sub.destroy()
            return res

        out = on_threads(n, body)
        ref = sum(np.arange(6, dtype=np.float32) + r for r in range(n))
        for r, res in enumerate(out):
            np.testing.assert_array_equal(res["allreduce"], ref)
            np.testing.assert_array_equal(res["max"], np.arange(6) + n - 1)
            np.testing.assert_array_equal(res["bcast"], [2] * 4)
            np.testing.assert_array_equal(res["allgather"], np.repeat(np.arange(n), 2))
            np.testing.assert_array_equal(res["rs"], [n, n])
            np.testing.assert_array_equal(res["a2a"], [10 * j + r for j in range(n)])
            np.testing.assert_array_equal(
                res["a2av"], np.concatenate([np.full(r + 1, 10 * j + r) for j in range(n)]))
            np.testing.assert_array_equal(
                res["agv"], np.concatenate([np.full(j + 1, j) for j in range(n)]))
            if r == 0:
                np.testing.assert_array_equal(res["gather"], np.repeat(np.arange(n), 2))
            np.testing.assert_array_equal(res["scatter"], [2 * r, 2 * r + 1])
            np.testing.assert_array_equal(res["bf16"], [0x4040] * 4)  # 3.0 in bf16
            self.assertEqual(res["ring"], (r - 1) % n)
            self.assertEqual(res["last"].backend, "host")
            self.assertEqual(len(res["topo"]), n)
            self.assertEqual(res["topo"][r].kind, unilink.LinkKind.SELF)
            self.assertEqual(res["split"][1], 2 if r % 2 == 0 else 1)

    def test_torch_tensor_and_stream(self):
        import torch

        def body(c):
            t = torch.arange(4, dtype=torch.bfloat16) + c.rank
            with c.stream() as s:
                c.allreduce(t, stream=s)
                s.synchronize()
            return t

        for t in on_threads(2, body):
            self.assertTrue(torch.equal(t, (2 * torch.arange(4) + 1).to(torch.bfloat16)))

    def test_one_sided(self):
        def body(c):
            mem = c.mem_alloc(64)
            mem.numpy("int32")[:] = -1
            w = c.window(mem)
            src = np.full(4, 100 + c.rank, np.int32)
            w.put(src, (c.rank + 1) % 2, offset=0)
            w.signal((c.rank + 1) % 2, 0)
            w.wait_signal(0, 1)
            got = mem.numpy("int32")[:4].copy()
            c.barrier()
            w.deregister()
            mem.free()
            return got

        out = on_threads(2, body)
        np.testing.assert_array_equal(out[0], [101] * 4)
        np.testing.assert_array_equal(out[1], [100] * 4)


class GroupBuffers(unittest.TestCase):
    def test_temporaries_live_until_the_group_ends(self):
        """A send of a temporary inside a group runs at the group's end: the binding must
        keep it alive (the ring test above read zeros when its memory was reused)."""
        n = 3

        def body(c):
            r = c.rank
            got = np.zeros(1024, np.int64)
            with unilink.group():
                c.send(np.full(1024, r + 1, np.int64), (r + 1) % n)  # freed here without the hold
                junk = [np.zeros(1024, np.int64) for _ in range(16)]  # reuses freed memory
                c.recv(got, (r - 1) % n)
            del junk
            return got

        out = on_threads(n, body)
        for r in range(n):
            np.testing.assert_array_equal(out[r], np.full(1024, (r - 1) % n + 1), "rank %d" % r)


    def test_temporaries_live_until_the_stream_drains(self):
        """A call queued on a stream runs on the stream's thread, after the Python call
        returned: the temporary input must live until the stream is synchronized."""
        n = 2

        def body(c):
            r = c.rank
            out = np.zeros(4096, np.int64)
            with c.stream() as s:
                time.sleep(0.05 * r)  # the ranks meet inside the queued call, not at once
                c.allreduce(np.full(4096, r + 1, np.int64), out, stream=s)  # temporary input
                junk = [np.zeros(4096, np.int64) for _ in range(16)]  # reuses freed memory
                s.synchronize()
            del junk
            return out

        for r, out in enumerate(on_threads(n, body)):
            np.testing.assert_array_equal(out, np.full(4096, 3), "rank %d" % r)


class Recovery(unittest.TestCase):
    """revoke / failed_ranks / shrink / async_error over the C API (thread ranks)."""

    def test_shrink_after_a_lost_rank(self):
        # Every rank has finished creating the communicator before rank 2 is lost: a peer
        # still inside creation's last barrier may otherwise see the abort there.
        created = threading.Barrier(4)

        def body(c):
            created.wait(30)
            if c.rank == 2:
                c.abort()  # a thread rank's way of being lost
                return None
            with self.assertRaises(unilink.PeerLost):
                c.allreduce(np.ones(1, np.int32))
            failed = c.failed_ranks()
            with c.shrink() as s:
                v = np.array([1 << c.rank], np.int32)
                s.allreduce(v)
                res = (failed, s.rank, s.size, int(v[0]))
            return res + (type(c.error),)

        out = on_threads(4, body, timeout_ms=5000)
        new_rank = {0: 0, 1: 1, 3: 2}
        for r in (0, 1, 3):
            failed, nr, size, total, err = out[r]
            self.assertEqual(failed, [2], "rank %d" % r)
            self.assertEqual((nr, size), (new_rank[r], 3), "rank %d" % r)
            self.assertEqual(total, (1 << 0) + (1 << 1) + (1 << 3))
            self.assertIs(err, unilink.PeerLost)  # the old communicator stays failed

    def test_revoke_releases_a_waiting_rank(self):
        def body(c):
            x = np.zeros(1, np.int32)
            t0 = time.monotonic()
            if c.rank == 0:
                time.sleep(0.2)  # let rank 1 block first
                c.revoke()
                c.revoke()  # idempotent
            else:
                with self.assertRaises(unilink.Revoked) as cm:
                    c.recv(x, 0)  # rank 0 never sends: only the revoke ends this
                self.assertEqual(cm.exception.code, -15)
            waited = time.monotonic() - t0
            with self.assertRaises(unilink.Revoked):
                c.allreduce(x)
            self.assertEqual(c.failed_ranks(), [])
            with c.shrink(timeout_ms=20000) as s:
                v = np.array([c.rank + 1], np.int32)
                s.allreduce(v)
                return waited, s.size, int(v[0])

        out = on_threads(2, body, timeout_ms=20000)
        self.assertLess(out[1][0], 5.0, "rank 1 waited %.1fs after the revoke" % out[1][0])
        self.assertEqual([o[1:] for o in out], [(2, 3)] * 2)

    def test_healthy_and_closed_communicators(self):
        def body(c):
            res = c.failed_ranks(), c.async_error()
            c.barrier()  # a peer that destroyed its communicator would count as lost
            return res

        self.assertEqual(on_threads(2, body), [([], None)] * 2)
        uid = unilink.UniqueId.create("host")
        c = unilink.Comm.init_rank(1, uid.bytes, 0)
        c.destroy()
        for call in (c.revoke, c.failed_ranks, c.async_error, c.shrink):
            with self.assertRaises(unilink.InvalidArgument):
                call()

    def test_nonblocking_init_and_collective(self):
        uid, started = unilink.UniqueId.create("host"), threading.Event()
        out, errs = [None, None], []

        def rank_main(r):
            try:
                if r == 1:
                    started.wait(20)
                c = unilink.Comm.init_rank(2, uid.bytes, r, blocking=False, timeout_ms=20000)
                # rank 1 has not started yet: rank 0's communicator cannot be ready
                first = c.async_error()
                started.set()
                c.wait_async(timeout_s=20)
                x = np.arange(4, dtype=np.int64) * (r + 1)
                c.allreduce(x)  # queued: the result is there once nothing is pending
                c.wait_async(timeout_s=20)
                out[r] = (first, x.tolist(), c.async_error())
                c.destroy()
            except BaseException as e:  # noqa: B902 - reported below
                errs.append(e)
                started.set()

        ts = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        if errs:
            raise errs[0]
        self.assertEqual(out[0][0], unilink.IN_PROGRESS)
        for first, x, after in out:
            self.assertEqual(x, [0, 3, 6, 9])
            self.assertIsNone(after)


class Errors(unittest.TestCase):
    def test_bad_argument_raises_and_changes_nothing(self):
        def body(c):
            x = np.ones(4, np.float32)
            with self.assertRaises(unilink.InvalidArgument) as cm:
                c.broadcast(x, root=7)
            self.assertIn("root", cm.exception.sentence.lower())
            np.testing.assert_array_equal(x, 1)
            return True

        self.assertEqual(on_threads(2, body), [True, True])

    def test_timeout_raises(self):
        def body(c):
            if c.rank == 0:
                with self.assertRaises(unilink.Timeout):
                    c.allreduce(np.ones(4, np.float32))
            return True

        self.assertEqual(on_threads(2, body, timeout_ms=500), [True, True])

    def test_dtype_map(self):
        import torch
        self.assertEqual(unilink.as_dtype(torch.bfloat16), unilink.DType.BF16)
        self.assertEqual(unilink.as_dtype(torch.float16), unilink.DType.FP16)
        self.assertEqual(unilink.as_dtype(np.float64), unilink.DType.FP64)
        self.assertEqual(unilink.as_dtype("fp8_e4m3"), unilink.DType.FP8_E4M3)
        if hasattr(torch, "float8_e5m2"):
            self.assertEqual(unilink.as_dtype(torch.float8_e5m2), unilink.DType.FP8_E5M2)


if __name__ == "__main__":
    unittest.main()
