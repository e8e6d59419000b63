#!/usr/bin/env python3
"""Check a JUnit file against the rules of the junit-10 schema that CI consumers validate
with (the Jenkins xunit plugin's junit-10.xsd). Written from the schema's element and
attribute rules, not copied from it:

  testsuites  attributes: name time tests failures errors      content: testsuite*
  testsuite   attributes: name* tests* failures* errors* group time skipped timestamp
                          hostname id package file log url
              content, any order and number: testsuite properties testcase
                                             system-out system-err
  properties  content: property*          property  attributes: name* value*, empty
  testcase    attributes: name* time classname group
              content, any order and number: skipped error failure system-out system-err
                                             rerunFailure rerunError flakyFailure flakyError
  skipped / error / failure  attributes: type message; text only
  rerun* / flaky*            attributes: message type*; text, then stackTrace?
                             system-out? system-err? in that order
  system-out / system-err    no attributes; text only
(* = required). Elements without text content may hold whitespace only. A time is digits
with optional thousands commas and an optional fraction ("1,234.5"; no sign). Attributes
in the XML Schema instance namespace (xsi:...) are allowed anywhere, as validators do.
Usage: junit10.py FILE...  (exit 0 when every file conforms)."""
import re
import sys
import xml.etree.ElementTree as ET

# digits and commas, at least 3 digits after the last comma, then an optional fraction
TIME = re.compile(r"^(?:[0-9,]*,[0-9]{3,}|[0-9]*)(?:\.[0-9]*)?$")
XSI = "{http://www.w3.org/2001/XMLSchema-instance}"

SUITES = ({"name", "time", "tests", "failures", "errors"}, set())
SUITE = ({"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp",
          "hostname", "id", "package", "file", "log", "url"}, {"name", "tests", "failures", "errors"})
CASE = ({"name", "time", "classname", "group"}, {"name"})
RESULT = ({"type", "message"}, set())
RERUN = ({"message", "type"}, {"type"})
PROPERTY = ({"name", "value"}, {"name", "value"})
NONE = (set(), set())
SUITE_CHILDREN = {"testsuite", "properties", "testcase", "system-out", "system-err"}
RERUN_TAGS = {"rerunFailure", "rerunError", "flakyFailure", "flakyError"}
CASE_CHILDREN = {"skipped", "error", "failure", "system-out", "system-err"} | RERUN_TAGS


def _attrs(e, rule, where, errs):
    allowed, required = rule
    for a in e.attrib:
        if a not in allowed and not a.startswith(XSI):
            errs.append("%s: attribute %r is not allowed on <%s>" % (where, a, e.tag))
    for a in sorted(required):
        if a not in e.attrib:
            errs.append("%s: <%s> needs attribute %r" % (where, e.tag, a))
    if "time" in e.attrib and e.tag in ("testsuite", "testsuites") and not TIME.match(e.get("time")):
        errs.append("%s: time=%r on <%s> is not a time" % (where, e.get("time"), e.tag))


def _no_text(e, where, errs):
    """Element-only content: whitespace between children, nothing else."""
    bits = [e.text] + [c.tail for c in e]
    if any(b and b.strip() for b in bits):
        errs.append("%s: <%s> holds text, which the schema does not allow" % (where, e.tag))


def _text_only(e, where, errs):
    for c in e:
        errs.append("%s: <%s> is not allowed in <%s> (text only)" % (where, c.tag, e.tag))


def _rerun(e, where, errs):
    _attrs(e, RERUN, where, errs)
    order = ["stackTrace", "system-out", "system-err"]
    last = -1
    for c in e:
        if c.tag not in order or order.index(c.tag) <= last:
            errs.append("%s: <%s> out of place in <%s>" % (where, c.tag, e.tag))
            continue
        last = order.index(c.tag)
        _attrs(c, NONE, where, errs)
        _text_only(c, where, errs)


def _case(c, where, errs):
    _attrs(c, CASE, where, errs)
    _no_text(c, where, errs)
    for r in c:
        if r.tag not in CASE_CHILDREN:
            errs.append("%s: <%s> is not allowed in <testcase>" % (where, r.tag))
        elif r.tag in RERUN_TAGS:
            _rerun(r, where, errs)
        else:
            _attrs(r, RESULT if r.tag in ("skipped", "error", "failure") else NONE, where, errs)
            _text_only(r, where, errs)


def _suite(s, where, errs):
    _attrs(s, SUITE, where, errs)
    _no_text(s, where, errs)
    where = "%s/testsuite[%s]" % (where, s.get("name"))
    for c in s:
        if c.tag not in SUITE_CHILDREN:
            errs.append("%s: <%s> is not allowed in <testsuite>" % (where, c.tag))
        elif c.tag == "testsuite":
            _suite(c, where, errs)
        elif c.tag == "properties":
            _attrs(c, NONE, where, errs)
            _no_text(c, where, errs)
            for p in c:
                if p.tag != "property":
                    errs.append("%s: <%s> is not allowed in <properties>" % (where, p.tag))
                    continue
                _attrs(p, PROPERTY, where, errs)
                if len(p) or (p.text and p.text.strip()):
                    errs.append("%s: <property> must be empty" % where)
        elif c.tag == "testcase":
            _case(c, where, errs)
        else:
            _attrs(c, NONE, where, errs)
            _text_only(c, where, errs)


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
        _attrs(root, SUITES, path, errs)
        _no_text(root, path, errs)
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
