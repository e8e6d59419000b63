"""Runs the measurements and the model for the report and gathers one data dict.

Sections: measured (this machine), modeled (one 8-GPU node per interconnect family),
train (step time per model size x GPU count x interconnect), claims (docs/nvlink-claims.md
rerun). Every number comes from a CLI through tools.py; nothing is computed here but
labels, and the communication share (exposed / step) from the two numbers train prints.
"""
import datetime
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess

from tools import ToolError

COLLECTIVES = ["allreduce", "allgather", "reduce_scatter"]
MODELS = {"7B": 7e9, "70B": 70e9, "405B": 405e9}
GPUS = [8, 64, 1024]
# Compute is held constant across interconnects (one H100-class GPU's bf16 dense peak at
# a typical MFU), so step-time differences come from the interconnect alone.
TRAIN_SETTINGS = {"tokens-per-gpu": 4096, "gpu-tflops": 989, "mfu": 0.45,
                  "bucket": "25MB", "overlap": 0.8, "grad-bytes": 2}
# ZeRO-1 for 7B (a replica with Adam state does not fit 80 GB), ZeRO-3 beside tensor
# parallelism (8, one node) for the big ones, pipeline stages for 405B (as Llama 3: TP 8 x
# PP 16) when the estimator has them.
ZERO = {"7B": 1, "70B": 3, "405B": 3}
FAMILY_NAMES = {"nvlink": "NVLink", "pcie": "PCIe Gen", "xgmi": "AMD xGMI",
                "hccs": "Huawei HCCS", "mlu-link": "Cambricon MLU-Link", "ualink": "UALink",
                "xelink": "Intel Xe Link", "roce": "RoCE", "infiniband": "InfiniBand",
                "nvswitch": "NVSwitch"}
CONF_RANK = {"high": 3, "medium": 2, "low": 1}

def _nop2p(topo):
    """A PCIe preset without GPU peer-to-peer ("p2p": false: its name or description says
    so, as `unilink-model topologies` prints them)."""
    return bool(re.search(r"no.?p2p|without p2p", topo["name"] + " " + topo["description"], re.I))


# The families the report should cover; each is (label, predicate over a topology row
# enriched with its scale-up link). Missing ones are listed as such.
EXPECTED = [
    ("NVLink 4 + NVSwitch, NVLS off", lambda t, l: l["family"] == "nvlink" and l["gen"] == "4" and t["shape"] == "switch" and not t["nvls"]),
    ("NVLink 4 + NVSwitch, NVLS on", lambda t, l: l["family"] == "nvlink" and l["gen"] == "4" and t["nvls"]),
    ("NVLink 5 + NVSwitch (8 GPUs)", lambda t, l: l["family"] == "nvlink" and l["gen"] == "5" and t["gpus"] <= 8),
    ("NVL72 (72-GPU NVLink 5 domain)", lambda t, l: l["family"] == "nvlink" and t["gpus"] >= 36),
    ("NVLink 3 (A100)", lambda t, l: l["family"] == "nvlink" and l["gen"] == "3"),
    ("PCIe Gen4 with P2P", lambda t, l: l["family"] == "pcie" and l["gen"] == "4" and not _nop2p(t)),
    ("PCIe Gen5 with P2P", lambda t, l: l["family"] == "pcie" and l["gen"] == "5" and not _nop2p(t)),
    ("PCIe Gen4 without P2P (staged through host memory)", lambda t, l: l["family"] == "pcie" and l["gen"] == "4" and _nop2p(t)),
    ("PCIe Gen5 without P2P (staged through host memory)", lambda t, l: l["family"] == "pcie" and l["gen"] == "5" and _nop2p(t)),
    ("PCIe with NVLink bridges", lambda t, l: re.search(r"bridge", t["name"] + " " + t["description"], re.I)),
    ("AMD xGMI (MI300X)", lambda t, l: l["family"] == "xgmi"),
    ("Huawei HCCS", lambda t, l: l["family"] == "hccs"),
    ("Cambricon MLU-Link", lambda t, l: l["family"] == "mlu-link"),
    ("Intel Gaudi (on-die RoCE)", lambda t, l: l["name"].startswith("gaudi")),
    ("UALink", lambda t, l: l["family"] == "ualink"),
    ("Intel Xe Link", lambda t, l: l["family"] == "xelink"),
]


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine_info(backends):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1048576:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    gpus = []
    if shutil.which("nvidia-smi"):
        try:
            p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            gpus = [l.strip() for l in p.stdout.splitlines() if l.startswith("GPU")]
        except (OSError, subprocess.SubprocessError):
            pass
    return dict(host=socket.gethostname(), cpu=cpu, cores=os.cpu_count() or 1, memory=mem,
                os=platform.platform(), gpus=gpus,
                backends={k: v[0] for k, v in backends.items()})


def _link_of(topo, links):
    for l in links:
        if l["name"] == topo["scaleup_link"]:
            return l
    return dict(name=topo["scaleup_link"], family="?", gen="?", confidence="low")


def topo_label(topo, link):
    fam = FAMILY_NAMES.get(link["family"], link["family"])
    if link["name"].startswith("gaudi"):
        fam = "Gaudi RoCE"
    gen = link["gen"] if link["family"] in ("nvlink", "pcie") else ""
    sep = "" if fam.endswith("Gen") else " "
    kind = f"{fam}{sep}{gen}".strip() if gen else fam
    shape = {"switch": "switch", "mesh": "mesh", "bus": "bus"}.get(topo["shape"], topo["shape"])
    extra = " +NVLS" if topo["nvls"] else " no P2P" if _nop2p(topo) else ""
    return f"{topo['name']} ({kind} x{topo['links']} {shape}{extra})"


def pick_topologies(tools, links, topos, wanted, user_file):
    """The modeled systems: every preset (or those named by --interconnects), and a user
    file. Presets with NVLS and no NVLS-off sibling also get an NVLS-off variant."""
    rows = []
    names = {t["name"] for t in topos}
    if wanted:
        unknown = [w for w in wanted if w not in names and not re.match(r".+x\d+$", w)]
        if unknown:
            raise ToolError(f"--interconnects: unknown preset(s) {','.join(unknown)}; "
                            f"known: {','.join(sorted(names))}")
    for t in topos:
        if wanted and t["name"] not in wanted:
            continue
        link = _link_of(t, links)
        rows.append(dict(topology=t["name"], label=topo_label(t, link), family=link["family"],
                         confidence=link["confidence"], link=link["name"], algos=None,
                         gpus=t["gpus"], description=t["description"], sources=t["sources"]))
        sibling = any(o["scaleup_link"] == t["scaleup_link"] and not o["nvls"] and
                      o["gpus"] == t["gpus"] for o in topos)
        if t["nvls"] and not sibling:
            rows.append(dict(rows[-1], label=rows[-1]["label"].replace("+NVLS", "NVLS off"),
                             algos="ring,tree", variant="NVLS off (--algo ring,tree)"))
    if user_file:
        rows.append(dict(topology=os.path.abspath(user_file),
                         label=f"{os.path.basename(user_file)} (your topology)",
                         family="user", confidence="user", link="", algos=None, gpus=None,
                         description="--topology " + user_file, sources=""))
    return rows


def coverage(links, topos):
    """[(family label, preset names covering it)] for every expected family."""
    out = []
    for label, pred in EXPECTED:
        have = [t["name"] for t in topos if pred(t, _link_of(t, links))]
        out.append(dict(family=label, presets=have,
                        note="" if have else _missing_note(label, links)))
    return out


def _missing_note(label, links):
    fam = {"Cambricon MLU-Link": "mlu-link", "Intel Xe Link": "xelink"}.get(label)
    if fam and any(l["family"] == fam for l in links):
        return "link in the catalog, no topology preset (write one for --topology FILE)"
    return "no preset in the catalog"


def measure(tools, raw, quick, gpus_here):
    """The host backend in threads and in processes beside Open MPI, then every real
    GPU backend that unilink-info reports available, each collective once."""
    sizes = ["-b", "8", "-e", "4M" if quick else "64M", "-f", "8" if quick else "4"]
    iters = ["-n", "3" if quick else "5", "-w", "1", "-c", "1"]
    backends = tools.backends()
    runs = []
    colls = COLLECTIVES[:1] if quick else COLLECTIVES
    mpirun = shutil.which("mpirun")
    mpi_plugin = os.path.exists(os.path.join(tools.build, "lib", "libunilink-mpi.so"))
    raw_mpi = os.access(os.path.join(tools.bin, "raw_mpi_bench"), os.X_OK)
    mpi_launch, ompi = [], False
    if mpirun:
        ompi = "open mpi" in subprocess.run([mpirun, "--version"], capture_output=True,
                                            text=True).stdout.lower()
        # MPICH's hydra has no --bind-to core
        mpi_launch = [mpirun, "--bind-to", "core", "-np", "2"] if ompi else [mpirun, "-np", "2"]
    for coll in colls:
        jobs = [("host (2 threads)", "host", [], ["-t", "2"], "host")]
        if mpirun and mpi_plugin:
            jobs.append(({"host": "host (2 processes)", "mpi": "mpi backend (Open MPI, 2 processes)"},
                         "host,mpi", mpi_launch, [], "mpirun"))
        for gpu_backend in ("nccl", "cuda", "ze"):
            if backends.get(gpu_backend, ("",))[0] == "available":
                n = max(1, gpus_here)
                jobs.append((f"{gpu_backend} ({n} GPU{'s' if n > 1 else ''})", gpu_backend, [],
                             ["-t", str(n)], gpu_backend))
        for label, blist, launch, extra, tag in jobs:
            name = f"bench-{coll}-{tag}"
            jpath = os.path.join(raw, name + ".json")
            try:
                res, _ = tools.bench(coll, blist, sizes + iters + extra, jpath, launch, name=name)
            except ToolError as e:
                runs.append(dict(collective=coll, label=str(label), backend=blist, rows=[],
                                 error=str(e), raw=name + ".txt"))
                continue
            for b in blist.split(","):
                rows = res.get(b, [])
                lab = label[b] if isinstance(label, dict) else label
                runs.append(dict(collective=coll, label=lab, backend=b, rows=rows,
                                 error="" if rows else "no rows for this backend (see raw output)",
                                 raw=name + ".txt", json=name + ".json",
                                 command=" ".join(launch + ["unilink-bench", coll, "--backends", blist] + sizes + iters + extra)))
        if mpirun and raw_mpi:
            # the same collective straight on MPI, same launcher, sizes and iterations: what
            # the host and mpi backends are measured against
            runs.append(_raw_mpi_run(tools, coll, mpi_launch, sizes + iters, ompi))
    return runs


def _raw_mpi_run(tools, coll, launch, args, ompi):
    name = f"bench-{coll}-raw-mpi"
    run = dict(collective=coll, label=f"raw {'Open MPI' if ompi else 'MPI'} (2 processes)",
               backend="raw-mpi", tool="raw_mpi_bench", raw=name + ".txt",
               command=" ".join(launch + ["raw_mpi_bench", coll] + args))
    try:
        rows, _ = tools.raw_mpi(coll, args, launch, name=name)
        return dict(run, rows=rows, error="")
    except ToolError as e:
        return dict(run, rows=[], error=str(e))


def model_sweeps(tools, systems, ranks, quick):
    out = []
    colls = COLLECTIVES[:1] if quick else COLLECTIVES
    hi = "256M" if quick else "4G"
    for coll in colls:
        for s in systems:
            if s.get("algos") and coll != "allreduce":
                continue  # NVLS is an allreduce algorithm in the model
            r = ranks if not (s["gpus"] and s["gpus"] < ranks) else s["gpus"]
            name = f"model-{coll}-{os.path.basename(s['topology']).replace('.json', '')}" + \
                ("-nvlsoff" if s.get("algos") else "")
            try:
                rows = tools.model_collective(coll, s["topology"], r, 8, hi, 4,
                                              algos=s.get("algos"), name=name)
                err = ""
            except ToolError as e:
                rows, err = [], str(e)
            conf = next((x.get("confidence") for x in rows if x.get("confidence")), None)
            out.append(dict(collective=coll, label=s["label"], topology=s["topology"],
                            ranks=r, algos=s.get("algos"), confidence=conf or s["confidence"],
                            rows=rows, error=err, raw=name + ".txt",
                            command=f"unilink-model collective {coll} --topology {s['topology']} "
                                    f"-b 8 -e {hi} -f 4 --ranks {r}" +
                                    (f" --algo {s['algos']}" if s.get("algos") else "")))
    return out


def train_table(tools, systems, models, gpus_list):
    tops = [s["topology"] for s in systems if not s.get("algos")]
    settings_note = dict(TRAIN_SETTINGS)
    has_tp = "--tp" in tools.help_text("unilink-model")
    cells, headers = [], []
    for mname, params in models.items():
        for g in gpus_list:
            st = dict(TRAIN_SETTINGS, zero=ZERO.get(mname, 3 if params >= 5e10 else 0))
            if has_tp and params >= 5e10:
                st["tp"] = 8
            if "--pp" in tools.help_text("unilink-model") and params >= 2e11:
                st["pp"] = max(1, min(16, g // 8))
            if "--gpu-mem" in tools.help_text("unilink-model"):
                st["gpu-mem"] = 80  # H100 80 GB: the estimator refuses what does not fit
            name = f"train-{mname}-{g}"
            try:
                rows, head = tools.model_train(params, g, tops, st, name=name)
                err = ""
            except ToolError as e:
                rows, head, err = [], "", str(e)
            headers.append(head)
            labels = {s["topology"]: s["label"] for s in systems if not s.get("algos")}
            conf = {s["topology"]: s["confidence"] for s in systems if not s.get("algos")}
            for i, r in enumerate(rows):
                # rows come in the order of --topology then --compare (a user file prints
                # the name inside it, which may be a preset's)
                topo = tops[i] if len(rows) == len(tops) else r["topology"]
                cells.append(dict(r, topology=topo, model=mname, params=params, gpus=g, label=labels.get(topo, topo),
                                  confidence=r.get("confidence") or conf.get(topo, ""),
                                  comm_share_pct=100.0 * r["exposed_s"] / r["step_s"] if r["step_s"] else 0.0,
                                  zero=st["zero"], tp=st.get("tp", 1), pp=st.get("pp", 1),
                                  settings=st, raw=name + ".txt"))
            if err:
                cells.append(dict(model=mname, params=params, gpus=g, error=err, settings=st,
                                  raw=name + ".txt"))
    return dict(settings=settings_note, zero=ZERO, tp_supported=has_tp, headers=headers,
                cells=cells)


def claims(tools, doc_path):
    """Each '## ' section of docs/nvlink-claims.md: its claim, its verdict, and every
    `$ unilink-model ...` command rerun now, with whether the output still matches."""
    if not os.path.exists(doc_path):
        return []
    text = open(doc_path, encoding="utf-8").read()
    out = []
    for sec in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = sec.partition("\n")
        verdict = ""
        m = re.search(r"^Verdict:(.*?)(?:\n\n|\Z)", body, flags=re.M | re.S)
        if m:
            verdict = " ".join(m.group(1).split())
        cmds = []
        for block in re.findall(r"```[a-z]*\n(.*?)```", body, flags=re.S):
            lines = block.splitlines()
            i = 0
            while i < len(lines):
                if lines[i].startswith("$ unilink-model "):
                    cmd = lines[i][2:].split("#")[0].strip()
                    j = i + 1
                    while j < len(lines) and not lines[j].startswith("$ "):
                        j += 1
                    doc_out = lines[i + 1:j]
                    cmds.append(_rerun(tools, cmd, doc_out, len(out), len(cmds)))
                    i = j
                else:
                    i += 1
        out.append(dict(claim=title.strip(), verdict=verdict, commands=cmds))
    return out


def _rerun(tools, cmd, doc_out, ci, k):
    argv = shlex.split(cmd)
    try:
        p = tools.run([tools.exe(argv[0])] + argv[1:], name=f"claim{ci + 1}-{k + 1}", timeout=60)
        now = p.stdout.splitlines()
    except ToolError as e:
        return dict(command=cmd, output=[str(e)], matches_doc=False)
    # A doc block may show a subset of rows ("(nvlink rows)"): every doc line must appear.
    have = set(l.rstrip() for l in now)
    same = all(l.rstrip() in have for l in doc_out if l.strip())
    return dict(command=cmd, output=now, matches_doc=same, doc_lines=len(doc_out))
