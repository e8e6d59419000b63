#!/usr/bin/env python3
"""`unilink-bench --plot FILE.png` writes a real PNG: signature, IHDR first, sane size."""
import argparse
import os
import struct
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--workdir", default=".")
    a = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="unilink-bench-plot-"), "plot.png")
    cmd = [a.bench, "allreduce", "-b", "1K", "-e", "1M", "-f", "8", "-n", "3", "-c", "1",
           "--backend", "host", "--plot", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=240, cwd=a.workdir)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    ok = True
    if p.returncode != 0:
        print("FAIL: exit code %d" % p.returncode)
        ok = False
    if "Plot written to %s" % out not in p.stdout:
        print("FAIL: plot path not printed")
        ok = False
    try:
        data = open(out, "rb").read()
    except OSError as e:
        print("FAIL: no PNG: %s" % e)
        return 1
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        print("FAIL: bad PNG signature %r" % data[:8])
        return 1
    length, ctype = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    if ctype != b"IHDR" or length != 13:
        print("FAIL: first chunk %r length %d" % (ctype, length))
        ok = False
    if not (400 <= width <= 4000 and 300 <= height <= 4000):
        print("FAIL: implausible size %dx%d" % (width, height))
        ok = False
    if len(data) < 5000:
        print("FAIL: PNG only %d bytes" % len(data))
        ok = False
    if data[-12:-4] != b"\x00\x00\x00\x00IEND"[0:8] and b"IEND" not in data[-12:]:
        print("FAIL: no IEND chunk")
        ok = False
    print("PNG %dx%d, %d bytes: %s" % (width, height, len(data), "OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
