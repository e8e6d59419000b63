#!/usr/bin/env python3
"""unilink-info's contract (CTest tools.info): --json parses; every parameter of the
library's table (api/src/param_list.h) is listed with type, owner, default and help;
build options include test_hooks and sanitizers; --backend host lists links between
ranks; an unknown --backend exits 3 with the reason.
Usage: check_info.py <unilink-info> <param_list.h> <ON|OFF test hooks>"""
import json
import re
import subprocess
import sys


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def main():
    exe, table, hooks = sys.argv[1], sys.argv[2], sys.argv[3].upper() in ("ON", "1", "TRUE")
    names = re.findall(r"^\s*X\(([A-Z0-9_]+),", open(table).read(), re.M)
    assert len(names) > 20, names
    r = run(exe, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    params = {p["name"]: p for p in d["params"]}
    for n in names:
        if n == "FAULT" and not hooks:
            assert "UNILINK_FAULT" not in params, "FAULT listed in a build without test hooks"
            continue
        p = params.get("UNILINK_" + n)
        assert p, "UNILINK_%s missing from unilink-info" % n
        assert p["type"] in ("int", "string") and p["owner"] != "other" and p["help"], p
    b = d["build"]
    assert b["test_hooks"] == ("on" if hooks else "off"), b
    for k in ("version", "sanitizers", "builtin_backends", "plugin_backends", "compiler"):
        assert k in b, (k, b)
    assert any(x["name"] == "host" and x["available"] for x in d["backends"]), d["backends"]

    r = run(exe, "--backend", "host", "--ranks", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [x["name"] for x in d["backends"]] == ["host"], d["backends"]
    devices = d["devices"]
    assert [x["rank"] for x in devices] == [0, 1, 2], devices
    assert all(x["device"] == -1 and x["memory"] == "host" for x in devices), devices
    m = d["machine"]
    assert m["logical_cpus"] >= 1 and m["memory_gib"] > 0 and isinstance(m["cpu"], str), m
    t = run(exe, "--backend", "host", "--ranks", "2")
    assert t.returncode == 0, t.stderr
    assert "machine:" in t.stdout and "rank 1    host memory (no device)" in t.stdout, t.stdout
    # an unknown figure prints '-', never a 0.0 that reads as a measured bandwidth
    shm = [l for l in t.stdout.splitlines() if " shm " in l]
    assert shm and all(" 0.0 " not in l and "not given" in l for l in shm), shm
    links = d["links"]
    assert len(links) == 9, links
    assert {(l["rank"], l["peer"]) for l in links} == {(a, c) for a in range(3) for c in range(3)}
    assert all(l["kind"] == ("self" if l["rank"] == l["peer"] else "shm") for l in links), links

    r = run(exe, "--backend", "no-such-backend")
    assert r.returncode == 3 and "no-such-backend" in r.stderr, (r.returncode, r.stderr)
    r = run(exe, "--ranks", "0")
    assert r.returncode == 2, r.returncode
    print("unilink-info OK: %d table parameters, test_hooks=%s" % (len(names), b["test_hooks"]))


if __name__ == "__main__":
    main()
