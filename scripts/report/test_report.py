#!/usr/bin/env python3
"""Tests of the comparison report (label report).

NumbersTest: the report's numbers equal what the CLIs print for the same settings
(unilink-model collective and train rerun here; unilink-bench's and raw_mpi_bench's own
printed tables).
ChromiumTest: Debian's headless Chromium opens report.html; every plot rendered and the
page fetched no resource. Both read one report made with --quick --json, either in
$UNILINK_REPORT_DIR (made there if absent) or in a temporary folder.

  test_report.py --build BUILD [unittest args, e.g. NumbersTest]
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = None
_report = {}


def report():
    if not _report:
        out = os.environ.get("UNILINK_REPORT_DIR") or tempfile.mkdtemp(prefix="ul-report.")
        if not os.path.exists(os.path.join(out, "report.json")):
            p = subprocess.run([sys.executable, os.path.join(HERE, "unilink_report.py"),
                                "--build", BUILD, "--out", out, "--quick", "--json",
                                "--model", "7B", "--model", "70B", "--gpus", "8,64"],
                               capture_output=True, text=True, timeout=240)
            if p.returncode != 0:
                raise AssertionError("unilink_report.py failed:\n" + p.stdout + p.stderr)
        with open(os.path.join(out, "report.json")) as f:
            _report.update(json.load(f), dir=out)
    return _report


def env():
    e = dict(os.environ)
    e.setdefault("UNILINK_PLUGIN_PATH", os.path.join(BUILD, "lib"))
    return e


def model(*args):
    p = subprocess.run([os.path.join(BUILD, "bin", "unilink-model")] + list(args),
                       capture_output=True, text=True, timeout=60, env=env())
    assert p.returncode == 0, p.stderr
    return p.stdout


class NumbersTest(unittest.TestCase):
    def test_modeled_points_equal_unilink_model_collective(self):
        r = report()
        md = open(os.path.join(r["dir"], "report.md")).read()
        entries = [m for m in r["modeled"] if m["collective"] == "allreduce" and m["rows"]
                   and not m["algos"]][:3]
        self.assertGreaterEqual(len(entries), 2)
        for m in entries:
            for row in (m["rows"][len(m["rows"]) // 2], m["rows"][-1]):
                out = model("collective", "allreduce", "--topology", m["topology"],
                            "--bytes", str(row["size"]), "--ranks", str(m["ranks"]))
                got = re.search(r"busbw ([0-9.]+) GB/s", out)
                t = re.search(r" ([0-9.]+) us,", out)
                self.assertIsNotNone(got, out)
                self.assertEqual(f"{row['busbw']:.2f}", got.group(1), (m["label"], row))
                self.assertEqual(f"{row['time_us']:.2f}", t.group(1), (m["label"], row))
        big = entries[0]["rows"][-1]
        if big["size"] in (1 << 28, 1 << 30):  # a size the Markdown table shows
            self.assertIn(f"{big['busbw']:.2f}", md)

    def test_train_cells_equal_unilink_model_train(self):
        r = report()
        t = r["train"]
        cells = [c for c in t["cells"] if "step_s" in c]
        self.assertTrue(cells)
        for c in (cells[0], cells[-1]):
            args = ["train", "--params", f"{c['params']:g}", "--gpus", str(c["gpus"]),
                    "--topology", c["topology"]]
            for k, v in c["settings"].items():
                args += [f"--{k}", str(v)]
            out = model(*args)
            row = next(l.split() for l in out.splitlines() if l.startswith(c["topology"] + " "))
            self.assertEqual(f"{c['step_s']:.4f}", row[8], c)
            self.assertEqual(f"{c['eff_pct']:.2f}", row[9], c)
            self.assertEqual(f"{c['exposed_s']:.4f}", row[7], c)

    def test_measured_rows_equal_unilink_bench_output(self):
        r = report()
        runs = [m for m in r["measured"] if m["rows"]]
        self.assertTrue(runs, "nothing measured")
        if shutil.which("mpirun") and os.access(os.path.join(BUILD, "bin", "raw_mpi_bench"),
                                                os.X_OK):
            raw = [m for m in runs if m.get("tool") == "raw_mpi_bench"]
            self.assertTrue(raw, "no raw MPI line though raw_mpi_bench and mpirun are here")
            self.assertTrue(all(m["label"].startswith("raw ") for m in raw))
        for m in runs:
            text = open(os.path.join(r["dir"], "raw", m["raw"])).read()
            # The bench's own table: rows of >= 13 fields, after '# Backend: <name>' (or,
            # side by side, the first block of that backend); out-of-place busbw is field 8.
            # A side-by-side table (time[b] busbw[b] columns) is read when no block is.
            # raw_mpi_bench prints no '# Backend:' line: its one table is the raw line's
            printed, side = {}, None
            cur = m["backend"] if m.get("tool") == "raw_mpi_bench" else None
            for line in text.splitlines():
                b = re.match(r"# Backend: (\S+)", line)
                if b:
                    cur, side = b.group(1), None
                f = line.split()
                if line.startswith("#") and "time[" in line:
                    side = {re.sub(r"\w+\[(.*)\]", r"\1", c): i for i, c in enumerate(f[1:])
                            if c.startswith("time[")}
                    cur = None
                if line.startswith("#") or not f or not f[0].isdigit():
                    continue
                if cur and len(f) >= 13:
                    printed.setdefault(cur, {}).setdefault(int(f[0]), (f[5], f[7]))
                elif side:
                    for name, i in side.items():
                        printed.setdefault(name, {}).setdefault(int(f[0]), (f[i], f[i + 1]))
            self.assertIn(m["backend"], printed, m["raw"])
            for row in m["rows"]:
                tm, bw = printed[m["backend"]][row["size"]]
                self.assertAlmostEqual(row["busbw"], float(bw), delta=0.006, msg=(m["label"], row))
                self.assertAlmostEqual(row["time_us"], float(tm), delta=0.006 + 1e-3 * float(tm))

    def test_every_family_listed(self):
        r = report()
        fams = {c["family"] for c in r["coverage"]}
        for want in ("Huawei HCCS", "Cambricon MLU-Link", "UALink", "PCIe Gen5"):
            self.assertIn(want, fams)


class ChromiumTest(unittest.TestCase):
    def test_page_renders_every_plot_and_fetches_nothing(self):
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            # a skip would read as a pass in CTest: the page must really be rendered
            self.fail("chromium not installed (scripts/setup.sh installs it)")
        r = report()
        page = os.path.join(r["dir"], "report.html")
        html = open(page).read()
        self.assertIsNone(re.search(r'(src|href)\s*=\s*"(?!#)', html), "page links a resource")
        nplots = html.count('class="plot"')
        self.assertGreaterEqual(nplots, 2)  # a busbw plot and the training plot
        with tempfile.TemporaryDirectory() as prof:
            p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0",
                                "--virtual-time-budget=5000", "--dump-dom", "file://" + page],
                               capture_output=True, text=True, timeout=90)
        body = re.search(r"<body[^>]*>", p.stdout)
        self.assertIsNotNone(body, p.stderr[-2000:])
        body = body.group(0)
        self.assertIn('data-rendered="yes"', body)
        self.assertIn(f'data-plots="{nplots}/{nplots}"', body)
        self.assertIn('data-resources="0"', body)
        self.assertNotIn("Failed to load resource", p.stderr)
        self.assertNotIn("Uncaught", p.stderr)


if __name__ == "__main__":
    if "--build" in sys.argv:
        i = sys.argv.index("--build")
        BUILD = os.path.abspath(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    else:
        BUILD = os.path.abspath(os.path.join(HERE, "..", "..", "build"))
    unittest.main()
