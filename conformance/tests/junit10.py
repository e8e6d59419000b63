#!/usr/bin/env python3
"""Structural check of a JUnit file against the rules of the junit-10 schema that CI
consumers validate with (the Jenkins xunit plugin's junit-10.xsd). Written from the
schema's documented structure, not copied from it:

  testsuites  attrs: name time tests failures disabled errors    children: testsuite*
  testsuite   attrs: name* tests* failures errors time disabled skipped timestamp
                     hostname id package file log url version
              children in order: properties?, testcase*, system-out?, system-err?
  properties  children: property* (attrs name* value*)
  testcase    attrs: name* assertions time classname status class file line log group url
              children, any order: skipped* error* failure* system-out* system-err*
  skipped     attrs: message            failure/error  attrs: message type
(* = required). Counts must be non-negative integers and times decimals.
Usage: junit10.py FILE...  (exit 0 when every file conforms)."""
import re
import sys
import xml.etree.ElementTree as ET

COUNT = re.compile(r"^[0-9]+$")
DECIMAL = re.compile(r"^-?([0-9]+(\.[0-9]*)?|\.[0-9]+)$")
SUITES_ATTRS = {"name", "time", "tests", "failures", "disabled", "errors"}
SUITE_ATTRS = {"name", "tests", "failures", "errors", "time", "disabled", "skipped",
               "timestamp", "hostname", "id", "package", "file", "log", "url", "version"}
CASE_ATTRS = {"name", "assertions", "time", "classname", "status", "class", "file", "line",
              "log", "group", "url"}
CASE_CHILDREN = {"skipped": {"message"}, "error": {"message", "type"},
                 "failure": {"message", "type"}, "system-out": set(), "system-err": set()}
SUITE_ORDER = ["properties", "testcase", "system-out", "system-err"]


def _attrs(e, allowed, required, where, errs):
    for a in e.attrib:
        if a not in allowed:
            errs.append("%s: attribute %r is not allowed on <%s>" % (where, a, e.tag))
    for a in required:
        if a not in e.attrib:
            errs.append("%s: <%s> needs attribute %r" % (where, e.tag, a))
    for a in ("tests", "failures", "errors", "skipped", "disabled", "assertions"):
        if a in e.attrib and not COUNT.match(e.get(a)):
            errs.append("%s: %s=%r is not a count" % (where, a, e.get(a)))
    if "time" in e.attrib and not DECIMAL.match(e.get("time")):
        errs.append("%s: time=%r is not a decimal" % (where, e.get("time")))


def _suite(s, where, errs):
    _attrs(s, SUITE_ATTRS, ("name", "tests"), where, errs)
    where = "%s/testsuite[%s]" % (where, s.get("name"))
    last = -1
    for c in s:
        if c.tag not in SUITE_ORDER:
            errs.append("%s: <%s> is not allowed in <testsuite>" % (where, c.tag))
            continue
        pos = SUITE_ORDER.index(c.tag)
        if pos < last or (pos == last and c.tag != "testcase"):
            errs.append("%s: <%s> out of order or repeated" % (where, c.tag))
        last = pos
        if c.tag == "properties":
            for p in c:
                if p.tag != "property":
                    errs.append("%s: <%s> in <properties>" % (where, p.tag))
                _attrs(p, {"name", "value"}, ("name", "value"), where, errs)
        elif c.tag == "testcase":
            _attrs(c, CASE_ATTRS, ("name",), where, errs)
            for r in c:
                if r.tag not in CASE_CHILDREN:
                    errs.append("%s: <%s> is not allowed in <testcase>" % (where, r.tag))
                    continue
                _attrs(r, CASE_CHILDREN[r.tag], (), where, errs)
                if len(r):
                    errs.append("%s: <%s> must hold text only" % (where, r.tag))
        elif len(c):
            errs.append("%s: <%s> must hold text only" % (where, c.tag))


def check(path):
    """Returns a list of problems (empty when the file conforms)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        return ["%s: %s" % (path, e)]
    errs = []
    if root.tag == "testsuite":
        _suite(root, path, errs)
    elif root.tag == "testsuites":
        _attrs(root, SUITES_ATTRS, (), path, errs)
        for s in root:
            if s.tag != "testsuite":
                errs.append("%s: <%s> is not allowed in <testsuites>" % (path, s.tag))
            else:
                _suite(s, path, errs)
    else:
        errs.append("%s: the root is <%s>, not <testsuites> or <testsuite>" % (path, root.tag))
    return errs


if __name__ == "__main__":
    bad = 0
    for p in sys.argv[1:]:
        for e in check(p):
            print(e)
            bad = 1
    sys.exit(bad)
