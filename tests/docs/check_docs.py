#!/usr/bin/env python3
"""Docs drift checks, run by CTest (tests/CMakeLists.txt, label example):
  1. every `sim:<preset>` (or `sim:<preset>x<N>`) named in README.md and docs/*.md is a
     preset of data/topologies/;
  2. every scripts/, bench/, tools/, tests/ or conformance/ script the docs name exists;
  3. docs/user-guide.md's parameter table is exactly `unilink-info --params --markdown`
     (the library's one parameter table), between its params:begin/end markers;
  4. the commands of the user guide's quick start that run built programs
     (`build/bin/...`) run and exit 0 in this build; the C example among them.
Usage: check_docs.py <source dir> <build dir>"""
import glob
import os
import re
import shlex
import subprocess
import sys


def docs(src):
    return [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))


def check_presets(src, errs):
    presets = {os.path.splitext(os.path.basename(p))[0]
               for p in glob.glob(os.path.join(src, "data", "topologies", "*.json"))}
    assert presets, "no presets in data/topologies"
    for path in docs(src):
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for m in re.finditer(r"\bsim:([A-Za-z0-9][A-Za-z0-9_.-]*)", line):
                name = re.sub(r"x[0-9]+$", "", m.group(1).rstrip("."))
                if name not in presets and not name.endswith(".json"):
                    errs.append("%s:%d: sim:%s is not a preset (have: %s)" %
                                (os.path.relpath(path, src), n, m.group(1), ", ".join(sorted(presets))))


def check_scripts(src, errs):
    pat = re.compile(r"\b((?:scripts|bench|tools|tests|conformance)/[A-Za-z0-9_/.-]+\.(?:sh|py))\b")
    for path in docs(src):
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if "nccl-tests" in line:  # names nccl-tests' own files (tools/analyze_perf_json.py)
                continue
            for m in pat.finditer(line):
                # at the root, or under a top-level folder (python/tests/... in docs/python.md)
                if not (os.path.exists(os.path.join(src, m.group(1))) or
                        glob.glob(os.path.join(src, "*", m.group(1)))):
                    errs.append("%s:%d: %s does not exist" % (os.path.relpath(path, src), n, m.group(1)))


def check_params(src, build, errs):
    guide = open(os.path.join(src, "docs", "user-guide.md"), encoding="utf-8").read()
    m = re.search(r"<!-- params:begin[^>]*-->\n(.*?)<!-- params:end -->", guide, re.S)
    if not m:
        errs.append("docs/user-guide.md: no <!-- params:begin --> ... <!-- params:end --> block")
        return
    env = dict(os.environ)
    env.pop("UNILINK_PLUGIN_PATH", None)  # plugins next to the library, as installed
    want = subprocess.run([os.path.join(build, "bin", "unilink-info"), "--params", "--markdown"],
                          capture_output=True, text=True, env=env, timeout=60)
    if want.returncode != 0:
        errs.append("unilink-info --params --markdown exited %d: %s" % (want.returncode, want.stderr))
    elif m.group(1) != want.stdout:
        errs.append("docs/user-guide.md parameter table differs from `unilink-info --params "
                    "--markdown`; regenerate it (see the comment at the table):\n" + want.stdout)


def quick_start_commands(src):
    guide = open(os.path.join(src, "docs", "user-guide.md"), encoding="utf-8").read()
    m = re.search(r"## Quick start\n\n```sh\n(.*?)```", guide, re.S)
    assert m, "docs/user-guide.md has no Quick start sh block"
    cmds = []
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("build/bin/"):
            cmds.append(line)
    return cmds


def check_quick_start(src, build, errs):
    cmds = quick_start_commands(src)
    if not any("allreduce" in c for c in cmds):
        errs.append("the quick start runs no C example")
    for c in cmds:
        argv = shlex.split(c)
        argv[0] = os.path.join(build, argv[0][len("build/"):])
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            errs.append("quick start `%s` timed out" % c)
            continue
        print("$ %s -> %d" % (c, r.returncode))
        if r.returncode != 0:
            errs.append("quick start `%s` exited %d:\n%s%s" % (c, r.returncode, r.stdout[-2000:],
                                                              r.stderr[-2000:]))


def main():
    src, build = sys.argv[1], sys.argv[2]
    errs = []
    check_presets(src, errs)
    check_scripts(src, errs)
    check_params(src, build, errs)
    check_quick_start(src, build, errs)
    for e in errs:
        print("DOCS:", e)
    print("docs checks: %d problem(s)" % len(errs))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
