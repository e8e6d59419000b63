#!/usr/bin/env python3
"""Runs a quick filtered conformance pass writing JSON and JUnit, then validates both:
they parse, their counts agree with each other and with the listed cases, and every
failure/skip carries a message. Usage: validate_reports.py <unilink-conformance> <workdir>"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    check(exe, work, {})
    # again with the core's test-only fault switch (a no-op in builds without test hooks),
    # so failure elements with their messages are validated too
    check(exe, work, {"UNILINK_FAULT": "allreduce:offbyone"})


def check(exe, work, extra_env):
    env = dict(os.environ, **extra_env)
    jpath, xpath = os.path.join(work, "r.json"), os.path.join(work, "r.xml")
    flt = "allreduce/*/count=7/*,broadcast/fp32/*,errors/*,p2p/ring/*,split/*"
    common = ["--backend", "host", "--launcher", "thread", "--ranks", "1,3", "--quick",
              "--filter", flt]
    listed = subprocess.run([exe] + common + ["--list"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    names = [l.split("  [skip:")[0] for l in listed.stdout.splitlines() if l.strip()]
    assert names, "filter selected nothing"
    run = subprocess.run([exe] + common + ["--json", jpath, "--junit", xpath],
                         capture_output=True, text=True, env=env)
    sys.stdout.write(run.stdout[-4000:])
    assert run.returncode in (0, 1), "exit %d: %s" % (run.returncode, run.stderr)

    with open(jpath) as f:
        doc = json.load(f)
    cases = doc["cases"]
    s = doc["summary"]
    assert doc["backend"] == "host" and doc["launcher"] == "thread", doc
    assert doc["ranks"] == [1, 3], doc["ranks"]
    assert s["total"] == len(cases) == len(names), (s, len(cases), len(names))
    assert sorted(c["name"] for c in cases) == sorted(names)
    for st in ("pass", "fail", "skip", "notrun"):
        assert s[st] == sum(1 for c in cases if c["status"] == st), st
    for c in cases:
        if c["status"] in ("fail", "skip"):
            assert c["message"], c
    mtotal = sum(v[k] for row in doc["matrix"].values() for v in row.values()
                 for k in ("pass", "fail", "skip", "notrun"))
    assert mtotal == s["total"], (mtotal, s)
    assert (run.returncode == 1) == (s["fail"] + s["notrun"] > 0)

    root = ET.parse(xpath).getroot()
    assert root.tag == "testsuites"
    tcs = root.findall("./testsuite/testcase")
    assert len(tcs) == s["total"] == int(root.get("tests")), (len(tcs), root.attrib)
    fails = sum(1 for t in tcs if t.find("failure") is not None)
    skips = sum(1 for t in tcs if t.find("skipped") is not None)
    errs = sum(1 for t in tcs if t.find("error") is not None)
    assert fails == s["fail"] == int(root.get("failures")), (fails, s)
    assert skips == s["skip"] == int(root.get("skipped")), (skips, s)
    assert errs == s["notrun"] == int(root.get("errors"))
    for ts in root.findall("testsuite"):
        assert int(ts.get("tests")) == len(ts.findall("testcase"))
        assert int(ts.get("failures")) == len(ts.findall("testcase/failure"))
        assert int(ts.get("skipped")) == len(ts.findall("testcase/skipped"))
    assert sorted(t.get("name") for t in tcs) == sorted(names)
    for t in tcs:
        for tag in ("failure", "skipped"):
            e = t.find(tag)
            if e is not None:
                assert e.get("message"), (t.get("name"), tag)
        f = t.find("failure")
        if f is not None and t.get("name").startswith("allreduce/"):
            assert all(w in f.text for w in ("rank", "index", "expected", "got")), f.text
    print("report formats OK: %d cases (%d pass, %d fail, %d skip)" %
          (s["total"], s["pass"], s["fail"], s["skip"]))


if __name__ == "__main__":
    main()
