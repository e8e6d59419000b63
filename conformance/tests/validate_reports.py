#!/usr/bin/env python3
"""Runs a quick filtered conformance pass writing JSON and JUnit, then validates both:
they parse, their counts agree with each other and with the listed cases, and every
failure/skip carries a message. Usage: validate_reports.py <unilink-conformance> <workdir>"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit10  # noqa: E402


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    check(exe, work, {})
    # again with the core's test-only fault switch (a no-op in builds without test hooks),
    # so failure elements with their messages are validated too
    check(exe, work, {"UNILINK_FAULT": "allreduce:offbyone"})
    check_checker(work)
    check_unavailable(exe, work)
    check_nothing_ran(exe, work)


def check_checker(work):
    """The junit-10 checker rejects what the Jenkins schema rejects, and accepts what it
    accepts (children of <testsuite> in any order)."""
    def errs_of(name, text):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text)
        return junit10.check(path)
    ok = ('<testsuites name="u" tests="1" failures="0" errors="0" time="1,234.5">'
          '<testsuite name="s" tests="1" failures="0" errors="0" skipped="0" time="0.1">'
          '<testcase name="c" classname="k" time="0.0"><skipped message="m"/></testcase>'
          '<properties><property name="seed" value="1"/></properties></testsuite></testsuites>')
    assert errs_of("good.xml", ok) == [], errs_of("good.xml", ok)
    bad = {
        # an extra attribute on each level
        "extra-suites.xml": (ok.replace('<testsuites name="u"', '<testsuites skipped="1" name="u"'),
                             "'skipped' is not allowed on <testsuites>"),
        "extra-suite.xml": (ok.replace('skipped="0"', 'disabled="0"'),
                            "'disabled' is not allowed on <testsuite>"),
        "extra-case.xml": (ok.replace('classname="k"', 'status="run"'),
                           "'status' is not allowed on <testcase>"),
        "extra-result.xml": (ok.replace('message="m"', 'reason="m"'),
                             "'reason' is not allowed on <skipped>"),
        # a missing required attribute
        "no-failures.xml": (ok.replace(' failures="0" errors="0" skipped', ' errors="0" skipped'),
                            "<testsuite> needs attribute 'failures'"),
        "no-errors.xml": (ok.replace(' errors="0" skipped', ' skipped'),
                          "<testsuite> needs attribute 'errors'"),
        "no-value.xml": (ok.replace(' value="1"', ''), "<property> needs attribute 'value'"),
        "no-name.xml": (ok.replace('<testcase name="c" ', '<testcase '),
                        "<testcase> needs attribute 'name'"),
        # bad content
        "bad-time.xml": (ok.replace('time="0.1"', 'time="-0.1"'), "is not a time"),
        "bad-child.xml": (ok.replace('<skipped message="m"/>', '<skip/>'),
                          "<skip> is not allowed in <testcase>"),
        "bad-text.xml": (ok.replace('<properties>', 'oops<properties>'), "holds text"),
    }
    for name, (text, want) in bad.items():
        errs = errs_of(name, text)
        assert any(want in e for e in errs), (name, want, errs)
    print("junit-10 checker: 1 valid file accepted, %d invalid ones rejected" % len(bad))


def check_unavailable(exe, work):
    """An unknown backend exits 3 and still leaves a JUnit file with one error case."""
    xpath = os.path.join(work, "unavail.xml")
    if os.path.exists(xpath):
        os.remove(xpath)
    run = subprocess.run([exe, "--backend", "no-such-backend", "--junit", xpath],
                         capture_output=True, text=True)
    assert run.returncode == 3, (run.returncode, run.stderr)
    assert junit10.check(xpath) == [], junit10.check(xpath)
    root = ET.parse(xpath).getroot()
    tcs = root.findall("./testsuite/testcase")
    assert len(tcs) == 1 and tcs[0].find("error") is not None, ET.tostring(root)
    assert "no-such-backend" in tcs[0].find("error").text
    print("unavailable backend: exit 3, one error case")


def check_nothing_ran(exe, work):
    """A run in which every case is skipped (or none selected) exits 4, not 0."""
    xpath = os.path.join(work, "none.xml")
    run = subprocess.run([exe, "--backend", "host", "--ranks", "2", "--filter", "no-such-case",
                          "--junit", xpath], capture_output=True, text=True)
    assert run.returncode == 4, (run.returncode, run.stderr)
    assert "nothing ran" in run.stderr, run.stderr
    assert junit10.check(xpath) == [], junit10.check(xpath)
    print("nothing ran: exit 4")


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

    problems = junit10.check(xpath)
    assert not problems, "\n".join(problems[:20])
    root = ET.parse(xpath).getroot()
    assert root.tag == "testsuites"
    tcs = root.findall("./testsuite/testcase")
    assert len(tcs) == s["total"] == int(root.get("tests")), (len(tcs), root.attrib)
    fails = sum(1 for t in tcs if t.find("failure") is not None)
    skips = sum(1 for t in tcs if t.find("skipped") is not None)
    errs = sum(1 for t in tcs if t.find("error") is not None)
    assert fails == s["fail"] == int(root.get("failures")), (fails, s)
    assert skips == s["skip"] == sum(int(ts.get("skipped")) for ts in root.findall("testsuite"))
    assert errs == s["notrun"] == int(root.get("errors"))
    for ts in root.findall("testsuite"):
        assert int(ts.get("tests")) == len(ts.findall("testcase"))
        assert int(ts.get("failures")) == len(ts.findall("testcase/failure"))
        assert int(ts.get("skipped")) == len(ts.findall("testcase/skipped"))
        # launcher in the suite name: merged thread and process files do not collide
        assert ts.get("name").startswith("conformance.host.thread."), ts.get("name")
        props = {p.get("name"): p.get("value") for p in ts.findall("properties/property")}
        assert props.get("seed") == "1" and props.get("launcher") == "thread", props
        assert props.get("backend") == "host" and props.get("version"), props
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
