"""bench/torch_vs_gloo.py: a smoke run (small sizes, one round) prints the table and exits
0; a worker killed mid-run ends the benchmark with an error within seconds."""
import os
import signal
import subprocess
import sys
import time
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                     "torch_vs_gloo.py")


def spawned_children(pid):
    """pids of the multiprocessing workers whose parent is pid (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmd:
            out.append(int(d))
    return out


class Bench(unittest.TestCase):
    def test_smoke_prints_the_table(self):
        p = subprocess.run([sys.executable, BENCH, "--rounds", "1", "--min", "4K", "--max", "16K",
                            "--timeout", "240"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, 0, out + err)
        lines = out.splitlines()
        header = [l for l in lines if l.split()[:2] == ["size", "gloo"]]
        self.assertEqual(len(header), 1, out)
        rows = [l.split() for l in lines if l.split() and l.split()[0] in ("4K", "16K")]
        self.assertEqual([r[0] for r in rows], ["4K", "16K"], out)
        for r in rows:
            self.assertEqual(len(r), 9, r)
            self.assertTrue(all(float(v) > 0 for v in r[1:4]), r)  # times; busbw may round to 0
            self.assertTrue(all(float(v) >= 0 for v in r[4:7]), r)
            self.assertTrue(r[7].endswith("x") and float(r[7][:-1]) > 0, r)
        self.assertIn("lowest ratio:", out)
        self.assertIn("8-byte all_reduce per call:", out)

    def test_dead_worker_is_an_error_within_seconds(self):
        p = subprocess.Popen([sys.executable, BENCH, "--rounds", "1000", "--min", "4K",
                              "--max", "4K"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        workers = []
        try:
            t0 = time.monotonic()
            while len(workers) < 2 and time.monotonic() - t0 < 60:
                time.sleep(0.2)
                workers = spawned_children(p.pid)
            self.assertEqual(len(workers), 2, "no workers found")
            time.sleep(3)  # into init or the measurement
            os.kill(max(workers), signal.SIGKILL)
            t_kill = time.monotonic()
            _, err = p.communicate(timeout=60)
            waited = time.monotonic() - t_kill
        finally:
            if p.poll() is None:  # it hung: stop it and the workers it leaves behind
                p.kill()
                p.communicate()
                for w in workers:
                    try:
                        os.kill(w, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self.assertEqual(p.returncode, 1, err.decode())
        # the survivor may fail too (its peer vanished); the killed one must be named
        self.assertRegex(err.decode(), r"rank [01] killed by signal 9")
        self.assertLess(waited, 15.0)


if __name__ == "__main__":
    unittest.main()
