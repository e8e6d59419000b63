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


QUOTED_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def dependinfo_sources(build, tdir):
    """{absolute object path: absolute source path} from the target's DependInfo.cmake,
    which CMake writes with the exact source of every object; None when there is none
    (another generator). Object names encode the source path lossily ("../" becomes
    "__/", so "a__b.c" and "a/../b.c" look alike): never decode them."""
    path = os.path.join(tdir, "DependInfo.cmake")
    if not os.path.exists(path):
        return None
    out = {}
    text = open(path, encoding="utf-8", errors="replace").read()
    for m in re.finditer(r'set\((CMAKE_DEPENDS_DEPENDENCY_FILES|CMAKE_DEPENDS_CHECK_\w+)'
                         r'((?:\s*"(?:[^"\\]|\\.)*")*)\s*\)', text):
        vals = [v.replace('\\"', '"').replace("\\\\", "\\") for v in QUOTED_RE.findall(m.group(2))]
        # DEPENDENCY_FILES: source, object, compiler, depfile; CHECK_<lang>: source, object
        step = 4 if m.group(1) == "CMAKE_DEPENDS_DEPENDENCY_FILES" else 2
        for i in range(0, len(vals) - step + 1, step):
            out[os.path.realpath(os.path.join(build, vals[i + 1]))] = vals[i]
    return out


def depfile_source(obj):
    """The source of @p obj from the compiler's depfile beside it (OBJ.d: "OBJ: SOURCE
    HEADERS..."), or None."""
    try:
        text = open(obj + ".d", encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    text = text.replace("\\\n", " ")
    colon = re.search(r"(?<!\\):\s", text)
    if not colon:
        return None
    m = re.match(r"\s*((?:\\ |[^\s])+)", text[colon.end():])
    return m.group(1).replace("\\ ", " ") if m else None


def target_dirs(build):
    """This build's target folders (CMakeFiles/TargetDirectories.txt lists them, and not
    those of builds nested inside it, such as the install check's); else every X.dir."""
    listed = os.path.join(build, "CMakeFiles", "TargetDirectories.txt")
    if os.path.exists(listed):
        for line in open(listed, encoding="utf-8", errors="replace"):
            d = line.strip()
            if d and os.path.isdir(d):
                yield d
        return
    for root, dirs, _ in os.walk(build):
        if "CMakeFiles" in root.split(os.sep):
            for d in dirs:
                if d.endswith(".dir"):
                    yield os.path.join(root, d)


def objects(build, src=None):
    """{target dir: [(source, object path)]}: each object of the build with the source
    it was compiled from (relative to @p src when given). An object whose source CMake
    no longer lists, or that no longer exists (left by a rename in an incremental build),
    is skipped: it is not part of the tree."""
    build = os.path.abspath(build)
    targets = defaultdict(list)
    for tdir in target_dirs(build):
        known = dependinfo_sources(build, tdir)
        for root, _, files in os.walk(tdir):
            for f in files:
                if not f.endswith(".o"):
                    continue
                obj = os.path.realpath(os.path.join(root, f))
                source = known.get(obj) if known is not None else depfile_source(obj)
                if source is None:
                    if known is not None:
                        continue
                    name = os.path.relpath(obj, tdir)[:-2]  # no record: the object's name
                else:
                    if not os.path.isabs(source):
                        source = os.path.join(build, source)
                    if not os.path.exists(source):
                        continue
                    name = os.path.relpath(source, src) if src is not None else source
                targets[tdir].append((os.path.normpath(name), obj))
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
        for name, obj in objs:
            d, u = nm_symbols(obj)
            for s in d:
                owner.setdefault(s, name)
            uses[name] = u
        edges, why = defaultdict(set), defaultdict(set)
        for name, u in uses.items():
            for s in u:
                o = owner.get(s)
                if OPS_TABLE_RE.match(s):
                    continue
                if o and o != name:
                    edges[name].add(o)
                    why[(name, o)].add(s)
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
