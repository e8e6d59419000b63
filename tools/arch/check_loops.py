#!/usr/bin/env python3
"""No dependency loops between source files (issue 19).

Two graphs, both over the project's own files:
  * includes: a header or source file -> the project headers it #includes ("...");
  * calls: an object file -> the object file that defines a global symbol it uses,
    within one build target (read with `nm` from the build tree's objects).
A cycle in either is a loop: two files that each need the other cannot be understood,
tested or replaced one at a time. Prints every loop with its files and the symbols or
includes that close it; exit 1 if there is any.

usage: check_loops.py SOURCE_DIR BUILD_DIR
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

SKIP_DIRS = {".git", "python", "fuzz"}  # fuzz drivers include sources by design
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# An ops table (ul_backend_host, mpi_coll_ops, ...) names every function of its backend:
# that is the plugin boundary (callbacks), not a dependency of the table's reader on them.
OPS_TABLE_RE = re.compile(r"^(ul_backend_[a-z0-9_]+|[a-z0-9_]+_ops)$")


def tarjan(nodes, edges):
    """Strongly connected components with more than one node (or a self loop)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def source_files(src):
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        if rel.split(os.sep)[0] in SKIP_DIRS:
            continue
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".cc", ".cpp")):
                yield os.path.normpath(os.path.join(rel, f))


def include_loops(src):
    files = set(source_files(src))
    edges = defaultdict(set)
    for f in files:
        text = open(os.path.join(src, f), encoding="utf-8", errors="replace").read()
        for inc in INCLUDE_RE.findall(text):
            for cand in (os.path.normpath(os.path.join(os.path.dirname(f), inc)),
                         os.path.normpath(os.path.join("api", "include", inc))):
                if cand in files:
                    edges[f].add(cand)
                    break
    return tarjan(files, edges), edges


def objects(build, src=None):
    """{target dir: [(source, object path)]} from CMake's object layout. With src, an
    object whose source file no longer exists (left by a rename in an incremental build)
    is skipped: it is not part of the tree."""
    targets = defaultdict(list)
    for root, _, files in os.walk(build):
        if ".dir" not in root or "CMakeFiles" not in root:
            continue
        tdir = root[: root.index(".dir") + 4]
        for f in files:
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(root, f), tdir)[:-2]
                if src is not None:
                    sdir = os.path.join(src, os.path.relpath(os.path.dirname(os.path.dirname(tdir)), build))
                    path = os.path.normpath(os.path.join(sdir, rel.replace("__", "..")))
                    if not os.path.exists(path):
                        continue
                targets[tdir].append((rel, os.path.join(root, f)))
    return targets


def nm_symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRGSCVW" and kind.isupper():
            defined.add(name)
    return defined, used


def call_loops(build, src=None):
    loops = []
    for tdir, objs in sorted(objects(build, src).items()):
        if len(objs) < 2:
            continue
        owner, uses = {}, {}
        for src, obj in objs:
            d, u = nm_symbols(obj)
            for s in d:
                owner.setdefault(s, src)
            uses[src] = u
        edges, why = defaultdict(set), defaultdict(set)
        for src, u in uses.items():
            for s in u:
                o = owner.get(s)
                if OPS_TABLE_RE.match(s):
                    continue
                if o and o != src:
                    edges[src].add(o)
                    why[(src, o)].add(s)
        for comp in tarjan(set(uses), edges):
            detail = []
            for a in comp:
                for b in comp:
                    if b in edges.get(a, ()):
                        syms = sorted(why[(a, b)])
                        detail.append("%s -> %s (%s%s)" % (a, b, ", ".join(syms[:4]),
                                                            ", ..." if len(syms) > 4 else ""))
            loops.append((os.path.relpath(tdir, build), comp, detail))
    return loops


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, build = sys.argv[1], sys.argv[2]
    inc, edges = include_loops(src)
    calls = call_loops(build, src)
    for comp in inc:
        print("include loop: " + " <-> ".join(comp))
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                print("    %s includes %s" % (a, b))
    seen = set()
    for tdir, comp, detail in calls:
        key = tuple(comp)
        if key in seen:  # one source compiled into several targets: report once
            continue
        seen.add(key)
        print("call loop in %s: %s" % (tdir, " <-> ".join(comp)))
        for d in detail:
            print("    " + d)
    n = len(inc) + len(seen)
    print("%d loop(s)" % n)
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
