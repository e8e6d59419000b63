"""`python3 -m unilink.run` (torchrun that works on Debian 12's Python 3.11) starts 2
workers of run_ddp.py; both finish a DDP step and an all_reduce with exact results."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run(unittest.TestCase):
    def test_two_workers_ddp_step(self):
        with tempfile.TemporaryDirectory(prefix="unilink-run-") as out:
            env = dict(os.environ, UNILINK_TEST_OUT=out, OMP_NUM_THREADS="1")
            cmd = [sys.executable, "-m", "unilink.run", "--nproc_per_node=2",
                   "--master_addr=127.0.0.1", "--master_port=%d" % free_port(),
                   "--max_restarts=0", "--monitor_interval=1",
                   os.path.join(HERE, "run_ddp.py")]
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=240)
            log = p.stdout.decode(errors="replace")
            self.assertEqual(p.returncode, 0, "unilink.run exited %d:\n%s" % (p.returncode, log))
            for r in range(2):
                path = os.path.join(out, "rank%d.json" % r)
                self.assertTrue(os.path.exists(path), "rank %d wrote nothing:\n%s" % (r, log))
                with open(path) as f:
                    got = json.load(f)
                self.assertEqual((got["rank"], got["world"], got["local_rank"]), (r, 2, r))
                self.assertEqual(got["backend"], "unilink")
                self.assertTrue(got["w_grad_ok"] and got["b_grad_ok"], "rank %d: %s" % (r, got))
                self.assertEqual(got["all_reduce"], [10, 12, 14, 16, 18])


if __name__ == "__main__":
    unittest.main()
