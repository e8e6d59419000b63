#!/usr/bin/env python3
"""Parse nccl-tests style benchmark output (nccl-tests' *_perf binaries and unilink-bench).

Layout (nccl-tests 2.19 src/util.cu): '#' comment/header lines; one row per size:
  size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong
(with -I, four per-iteration columns follow each #wrong); anything after the last
in-place column (timestamps, unilink-bench --extra-columns) is kept as 'extra'.
Footer: '# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth : X [OK|FAILED]'.

parse(text, strict=True) is what third-party consumers assume (cloudai and Azure keep
rows of exactly 13 fields; gates grep "Avg bus bandwidth"): every line that is not a
comment or empty must be a data row of exactly 13 fields (21 with -I, +1 with a
timestamp), or nccl-tests' ' .. host pid N: Test failure' line; at most one line matches
/Avg bus bandwidth/ and it is the footer. Violations raise StrictError.

Usage: parse_nccl_tests.py FILE [--json] [--strict]
"""
import json
import re
import sys

_FOOT_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)\s*$")
_FOOT_BW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)\s*(OK|FAILED)?\s*$")
_NA = ("N/A", "n/a", "-")


def _num(tok):
    if tok in _NA:
        return None
    return float(tok)


def _side(toks, per_iter):
    side = {"time": _num(toks[0]), "algbw": _num(toks[1]), "busbw": _num(toks[2]),
            "wrong": None if toks[3] in _NA else int(float(toks[3])),
            "time_text": toks[0]}  # as printed: its last digit bounds the rounding
    if per_iter:
        side["iter"] = [_num(t) for t in toks[4:8]]
    return side


class StrictError(ValueError):
    pass


_GATE = re.compile(r"Avg bus bandwidth")
_FAILURE = re.compile(r"^\s*\.\. \S+ pid \d+: Test failure")


def parse(text, strict=False):
    """Return {'header': {...}, 'columns': [...], 'rows': [...], 'footer': {...}}."""
    out = {"header": {}, "columns": [], "rows": [], "footer": {}, "devices": [],
           "gate_lines": [], "failure": False}
    per_iter = False
    timestamps = False
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if _GATE.search(line):
            out["gate_lines"].append(line)
            if strict and len(out["gate_lines"]) > 1:
                raise StrictError("more than one line a bandwidth gate matches: %r" % line)
            if strict and not _FOOT_BW.match(s):
                raise StrictError("gate-able line that is not the footer: %r" % line)
        if _FAILURE.match(line):
            out["failure"] = True
            continue
        if s.startswith("#"):
            m = _FOOT_OOB.match(s)
            if m:
                out["footer"]["out_of_bounds"] = int(m.group(1))
                out["footer"]["out_of_bounds_ok"] = m.group(2) == "OK"
                continue
            m = _FOOT_BW.match(s)
            if m:
                out["footer"]["avg_busbw"] = float(m.group(1))
                out["footer"]["avg_busbw_verdict"] = m.group(2)
                continue
            body = s[1:].split()
            if body[:3] == ["size", "count", "type"]:
                out["columns"] = body
                per_iter = "i_min" in body
                timestamps = "timestamp" in body
            elif body[:1] == ["nThread"]:
                kv = re.findall(r"([A-Za-z][A-Za-z ]*?):?\s+(\d+)(?:\((\w+)\))?", s[1:])
                for k, v, unit in kv:
                    out["header"][k.strip()] = int(v)
                    if unit:
                        out["header"]["step_kind"] = unit
            elif body[:1] == ["Rank"] and "device" in body:
                out["devices"].append(s)
            continue
        toks = s.split()
        width = 8 if per_iter else 4
        if strict:
            want = 5 + 2 * width + (2 if timestamps else 0)  # date and time tokens
            if len(toks) != want or not toks[0].isdigit() or not toks[1].isdigit():
                raise StrictError("data row with %d fields (want %d): %r" % (len(toks), want, line))
        if len(toks) < 13 or not toks[0].isdigit() or not toks[1].isdigit():
            continue  # e.g. ' .. host pid N: Test failure'

        if len(toks) < 5 + 2 * width:
            raise ValueError("short row: %r" % line)
        row = {"size": int(toks[0]), "count": int(toks[1]), "type": toks[2],
               "redop": toks[3], "root": int(toks[4]),
               "out_of_place": _side(toks[5:5 + width], per_iter),
               "in_place": _side(toks[5 + width:5 + 2 * width], per_iter),
               "extra": toks[5 + 2 * width:]}
        out["rows"].append(row)
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    with open(argv[1]) as f:
        res = parse(f.read(), strict="--strict" in argv)
    if "--json" in argv:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print("%d rows, columns=%s, footer=%s" % (len(res["rows"]), res["columns"], res["footer"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
