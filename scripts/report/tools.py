"""The one place that runs unilink's CLIs and reads what they print.

Everything the report knows comes through here: unilink-bench (its -J JSON, else its
nccl-tests table), unilink-model (links, topologies, collective, train: JSON when the
binary offers --json, else its text tables) and unilink-info. When a tool's output
changes, this module is what changes.
"""
import json
import os
import re
import subprocess
import time

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


class ToolError(RuntimeError):
    """A CLI failed or printed something this module cannot read."""


class Tools:
    def __init__(self, build, log=None):
        self.build = os.path.abspath(build)
        self.bin = os.path.join(self.build, "bin")
        self.env = dict(os.environ)
        self.env.setdefault("UNILINK_PLUGIN_PATH", os.path.join(self.build, "lib"))
        self.env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        self.env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        self.log = log  # callable(name, argv, stdout) that keeps raw outputs, or None
        self._help = {}
        self.times = []  # (seconds, name) per command: the report says where time went

    # -- running ---------------------------------------------------------------
    def exe(self, name):
        path = os.path.join(self.bin, name)
        if not os.access(path, os.X_OK):
            raise ToolError(f"{path} not found (build it first)")
        return path

    def run(self, argv, name=None, timeout=120, check=True):
        t0 = time.time()
        try:
            p = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                               timeout=timeout, errors="replace")
        except subprocess.TimeoutExpired:
            raise ToolError(f"'{' '.join(argv)}' ran past {timeout} s")
        self.times.append((time.time() - t0, name or argv[0]))
        if self.log and name:
            self.log(name, argv, p.stdout + (("\n# stderr:\n" + p.stderr) if p.stderr else ""))
        if check and p.returncode != 0:
            raise ToolError(f"'{' '.join(argv)}' exited {p.returncode}: "
                            f"{(p.stderr or p.stdout).strip()[-400:]}")
        return p

    def help_text(self, tool, *sub):
        key = (tool,) + sub
        if key not in self._help:
            p = self.run([self.exe(tool)] + list(sub) + ["--help"], check=False, timeout=20)
            self._help[key] = p.stdout + p.stderr
        return self._help[key]

    def model_has_json(self, sub):
        """True when `unilink-model <sub>` documents --json (the model helper adds it)."""
        return "--json" in self.help_text("unilink-model") or \
            "--json" in self.help_text("unilink-model", sub)

    # -- unilink-info ------------------------------------------------------------
    def backends(self):
        """{name: (status, where)} from unilink-info's backend list."""
        p = self.run([self.exe("unilink-info")], name="unilink-info", check=False, timeout=30)
        out = {}
        for line in p.stdout.splitlines():
            m = re.match(r"^  (\S+)\s+(available|unavailable\S*)\s+(\S.*)?$", line)
            if m and m.group(1) != "NAME":
                out[m.group(1)] = (m.group(2), (m.group(3) or "").strip())
        return out

    # -- unilink-model links / topologies ---------------------------------------
    def links(self):
        """[{name, family, gen, line_gbps, eff, eff_gbps, lat_us, confidence, source}]"""
        p = self.run([self.exe("unilink-model"), "links"], name="model-links")
        rows = []
        for line in p.stdout.splitlines():
            f = line.split(None, 8)
            if len(f) >= 8 and f[0] != "name" and not line.startswith("#") and \
                    re.fullmatch(NUM, f[3]):
                rows.append(dict(name=f[0], family=f[1], gen=f[2], line_gbps=float(f[3]),
                                 eff=float(f[4]), eff_gbps=float(f[5]), lat_us=float(f[6]),
                                 confidence=f[7], source=f[8] if len(f) > 8 else ""))
        if not rows:
            raise ToolError("unilink-model links printed no rows")
        return rows

    def topologies(self):
        """[{name, gpus, scaleup_link, links, shape, nvls, nics, nic_link, ring_gbps,
        nic_gbps, description, sources}] from `unilink-model topologies`."""
        p = self.run([self.exe("unilink-model"), "topologies"], name="model-topologies")
        rows = []
        pat = re.compile(r"^(\S+)\s+(\d+)\s+(\S+)\s+x(\d+)\s+(\w+)\s*(\+NVLS)?\s+"
                         r"(\d+)\s+x\s+(\S+)\s+(" + NUM + r")\s+(" + NUM + r")\s+(.*)$")
        for line in p.stdout.splitlines():
            m = pat.match(line)
            if m:
                rows.append(dict(name=m.group(1), gpus=int(m.group(2)),
                                 scaleup_link=m.group(3), links=int(m.group(4)),
                                 shape=m.group(5), nvls=bool(m.group(6)),
                                 nics=int(m.group(7)), nic_link=m.group(8),
                                 ring_gbps=float(m.group(9)), nic_gbps=float(m.group(10)),
                                 description=m.group(11).strip(), sources=""))
            elif rows and line.strip().startswith("sources:"):
                rows[-1]["sources"] = line.split("sources:", 1)[1].strip()
        if not rows:
            raise ToolError("unilink-model topologies printed no rows")
        return rows

    # -- unilink-model collective ------------------------------------------------
    def model_collective(self, coll, topology, ranks, minbytes=None, maxbytes=None,
                         factor=None, nbytes=None, algos=None, name=None):
        """[{size, time_us, algbw, busbw, algorithm, confidence?}] for a sweep or one size."""
        argv = [self.exe("unilink-model"), "collective", coll, "--topology", topology,
                "--ranks", str(ranks)]
        argv += ["--bytes", str(nbytes)] if nbytes is not None else \
            ["-b", str(minbytes), "-e", str(maxbytes), "-f", str(factor)]
        if algos:
            argv += ["--algo", algos]
        use_json = self.model_has_json("collective")
        if use_json:
            argv.append("--json")
        p = self.run(argv, name=name)
        if use_json:
            try:
                return parse_model_collective_json(json.loads(p.stdout))
            except (ValueError, KeyError, TypeError):
                pass  # a --json that prints something else: read the text instead
        rows = parse_model_collective_text(p.stdout)
        for r in rows:
            if r["size"] is None:
                r["size"] = int(nbytes)
        return rows

    # -- unilink-model train -----------------------------------------------------
    def model_train(self, params, gpus, topologies, settings, name=None):
        """[{topology, compute_s, buckets, bucket_ms, algorithm, busbw, sync_s,
        exposed_s, step_s, eff_pct}] for each topology (the first is --topology)."""
        argv = [self.exe("unilink-model"), "train", "--params", f"{params:g}",
                "--gpus", str(gpus), "--topology", topologies[0]]
        if len(topologies) > 1:
            argv += ["--compare", ",".join(topologies[1:])]
        for k, v in settings.items():
            argv += [f"--{k}", str(v)]
        use_json = self.model_has_json("train")
        p = self.run(argv + (["--json"] if use_json else []), name=name)
        if use_json:
            try:
                return parse_model_train_json(json.loads(p.stdout)), " ".join(argv[1:])
            except (ValueError, KeyError, TypeError):
                pass  # not the JSON we know: read the table
        return parse_model_train_text(p.stdout), p.stdout.splitlines()[0] if p.stdout else ""

    # -- unilink-bench -----------------------------------------------------------
    def bench(self, coll, backends, args, json_path, launcher=(), name=None, timeout=120):
        """Runs unilink-bench (optionally under a launcher such as mpirun) and returns
        {backend: [{size, time_us, algbw, busbw, wrong}]} (out-of-place) plus the stdout."""
        argv = list(launcher) + [self.exe("unilink-bench"), coll, "--backends", backends] + \
            list(args) + ["-J", json_path]
        if os.path.exists(json_path):
            os.remove(json_path)  # nccl-tests writes FILE.N beside an existing FILE
        p = self.run(argv, name=name, timeout=timeout, check=False)
        m = re.search(r"^# Writing JSON output to (\S+)", p.stdout, flags=re.M)
        if m and m.group(1) != json_path and os.path.exists(m.group(1)):
            os.replace(m.group(1), json_path)
        res = {}
        if os.path.exists(json_path):
            try:
                with open(json_path) as f:
                    res = parse_bench_json(json.load(f))
            except ValueError:
                res = {}
        if not res:
            res = parse_bench_text(p.stdout)
        if not res and p.returncode != 0:
            raise ToolError(f"'{' '.join(argv)}' exited {p.returncode}: "
                            f"{(p.stderr or p.stdout).strip()[-400:]}")
        return res, p.stdout

    # -- raw_mpi_bench -------------------------------------------------------------
    def raw_mpi(self, coll, args, launcher, name=None, timeout=120):
        """Runs raw_mpi_bench (MPI alone, no unilink) under the launcher and returns
        [{size, time_us, algbw, busbw, wrong}] (out-of-place) plus the stdout."""
        argv = list(launcher) + [self.exe("raw_mpi_bench"), coll] + list(args)
        p = self.run(argv, name=name, timeout=timeout, check=False)
        rows = parse_bench_text(p.stdout, backend="raw-mpi").get("raw-mpi", [])
        for r in rows:  # a count, as unilink-bench's JSON gives it (N/A with -c 0)
            r["wrong"] = int(r["wrong"]) if r["wrong"].isdigit() else None
        if not rows:
            raise ToolError(f"'{' '.join(argv)}' exited {p.returncode} with no rows: "
                            f"{(p.stderr or p.stdout).strip()[-400:]}")
        return rows, p.stdout


# -- parsers (pure functions: the unit tests feed them fixed text) ---------------------
def parse_model_collective_text(text):
    rows = []
    one = re.compile(r"^size .*?: (\S+) (" + NUM + r") us, algbw (" + NUM +
                     r") GB/s, busbw (" + NUM + r") GB/s")
    size_one = None
    conf = None
    for line in text.splitlines():
        c = re.match(r"^# confidence (\w+)", line)
        if c:
            conf = c.group(1)
            continue
        m = one.match(line)
        if m:
            rows.append(dict(size=size_one, time_us=float(m.group(2)),
                             algbw=float(m.group(3)), busbw=float(m.group(4)),
                             algorithm=m.group(1)))
            continue
        f = line.split()
        if len(f) == 5 and f[0].isdigit() and all(re.fullmatch(NUM, x) for x in f[1:4]):
            rows.append(dict(size=int(f[0]), time_us=float(f[1]), algbw=float(f[2]),
                             busbw=float(f[3]), algorithm=f[4]))
    if not rows:
        raise ToolError("unilink-model collective printed no result rows")
    if conf:
        for r in rows:
            r["confidence"] = conf
    return rows


def parse_model_collective_json(doc):
    items = doc.get("results", doc) if isinstance(doc, dict) else doc
    rows = []
    for r in items:
        rows.append(dict(size=int(r.get("size", r.get("bytes"))),
                         time_us=float(r.get("time_us", r.get("time"))),
                         algbw=float(r.get("algbw", r.get("alg_bw"))),
                         busbw=float(r.get("busbw", r.get("bus_bw"))),
                         algorithm=str(r.get("algorithm", "")),
                         confidence=r.get("confidence")))
    if not rows:
        raise ToolError("unilink-model collective --json had no results")
    return rows


def parse_model_train_text(text):
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) == 10 and not line.startswith("#") and re.fullmatch(NUM, f[1]) and \
                re.fullmatch(NUM, f[9]):
            rows.append(dict(topology=f[0], compute_s=float(f[1]), buckets=int(f[2]),
                             bucket_ms=float(f[3]), algorithm=f[4], busbw=float(f[5]),
                             sync_s=float(f[6]), exposed_s=float(f[7]), step_s=float(f[8]),
                             eff_pct=float(f[9])))
        if line.startswith("# gradient sync on"):
            break  # the bucket-size table that follows is not per topology
    if not rows:
        raise ToolError("unilink-model train printed no rows")
    return rows


def parse_model_train_json(doc):
    items = doc.get("results", doc) if isinstance(doc, dict) else doc
    rows = []
    for r in items:
        rows.append(dict(topology=r["topology"], compute_s=float(r["compute_s"]),
                         buckets=int(r.get("buckets", 0)), bucket_ms=None,
                         algorithm=str(r.get("algorithm", "")),
                         busbw=float(r.get("busbw_gbps", r.get("busbw", 0.0))),
                         sync_s=float(r.get("comm_s", r.get("sync_s", 0.0))),
                         exposed_s=float(r["exposed_s"]), step_s=float(r["step_s"]),
                         eff_pct=100.0 * float(r["efficiency"]),
                         confidence=r.get("confidence"), mem_gb_per_gpu=r.get("mem_gb_per_gpu"),
                         dp=r.get("dp"), sources=r.get("sources", "")))
    if not rows:
        raise ToolError("unilink-model train --json had no rows")
    return rows


def _walk_results(node, backend=None):
    """Yields (backend, result) for every nccl-tests result object anywhere in the JSON:
    unilink's flat list with a backend field, or a list per backend."""
    if isinstance(node, dict):
        if "size" in node and "out_of_place" in node:
            yield node.get("backend", backend), node
            return
        b = node.get("backend") if isinstance(node.get("backend"), str) else \
            (node.get("name") if "results" in node else backend)
        for v in node.values():
            yield from _walk_results(v, b or backend)
    elif isinstance(node, list):
        for v in node:
            yield from _walk_results(v, backend)


def parse_bench_json(doc):
    out = {}
    for backend, r in _walk_results(doc):
        oop = r["out_of_place"]
        out.setdefault(backend or "?", []).append(dict(
            size=int(r["size"]), time_us=float(oop["time"]), algbw=float(oop["alg_bw"]),
            busbw=float(oop["bus_bw"]), wrong=oop.get("nwrong"),
            algorithm=r.get("algorithm", ""),
            time_source=r.get("time_source", "measured")))
    return out


def parse_bench_text(text, backend="?"):
    """nccl-tests rows (13 fields, or unilink's 13 + extras), backend from '# Backend:'
    (the given name until one appears: raw_mpi_bench prints none)."""
    out, side = {}, False
    for line in text.splitlines():
        m = re.match(r"^# Backend: (\S+)", line)
        if m:
            backend, side = m.group(1), False
        if line.startswith("# Side by side"):
            side = True  # ratios of rows already read
        f = line.split()
        if side or line.startswith("#") or len(f) < 13 or not f[0].isdigit():
            continue
        out.setdefault(backend, []).append(dict(size=int(f[0]), time_us=float(f[5]),
                                                algbw=float(f[6]), busbw=float(f[7]),
                                                wrong=f[8], algorithm=""))
    return out
