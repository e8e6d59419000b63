#!/usr/bin/env python3
"""Regenerates the command outputs shown in docs/nvlink-claims.md from the tools.

Every fenced block of the page may hold `$ unilink-model ...` lines; the lines after one
(up to the next `$ ` line or the block's end) are that command's output, written here
from a fresh run, never by hand. A command line may end with a comment that says which
part of the output the page shows:
  # show: REGEX    only the lines matching REGEX (Python re.search)
  # until: REGEX   the lines before the first one matching REGEX
The prose around the blocks is left as it is.

  claims.py --build BUILD [--doc docs/nvlink-claims.md]            rewrite the page
  claims.py --build BUILD --check                                  exit 1 on drift (a test)
"""
import argparse
import difflib
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tools import ToolError, Tools  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.M | re.S)


def split_command(line):
    """'$ unilink-model a b  # show: X' -> ('unilink-model a b', {'show': 'X'})"""
    cmd, _, note = line[2:].partition("#")
    opts = {}
    m = re.match(r"\s*(show|until):\s*(.*\S)\s*$", note)
    if m:
        opts[m.group(1)] = m.group(2)
    return cmd.strip(), opts


def shown(output_lines, opts):
    out = []
    for line in output_lines:
        if "until" in opts and re.search(opts["until"], line):
            break
        if "show" in opts and not re.search(opts["show"], line):
            continue
        out.append(line.rstrip())
    return out


def regenerate(text, run):
    """The page with every command's output replaced by run(argv) -> [lines]."""
    def block(m):
        lines = m.group(1).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not any(l.startswith("$ unilink-model ") for l in lines):
            return m.group(0)
        out, i = [], 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ unilink-model "):
                cmd, opts = split_command(line)
                out.append(line.rstrip())
                out.extend(shown(run(shlex.split(cmd)), opts))
                i += 1
                while i < len(lines) and not lines[i].startswith("$ "):
                    i += 1
            else:
                if line.strip() or out:  # no blank line before the first command
                    out.append(line)
                i += 1
        fence = m.group(0).split("\n", 1)[0]
        return fence + "\n" + "\n".join(out) + "\n```"
    return FENCE.sub(block, text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--doc", default=os.path.join(REPO, "docs", "nvlink-claims.md"))
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    a = ap.parse_args(argv)
    tools = Tools(a.build)

    def run(args):
        try:
            p = tools.run([tools.exe(args[0])] + args[1:], timeout=120)
        except ToolError as e:
            raise SystemExit(f"claims.py: {e}")
        return p.stdout.splitlines()

    with open(a.doc, encoding="utf-8") as f:
        old = f.read()
    new = regenerate(old, run)
    if a.check:
        if new != old:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), a.doc, "regenerated"))
            print(f"\nclaims.py: {a.doc} differs from what the tools print now; run "
                  f"scripts/report/claims.py --build {a.build} and review the prose", file=sys.stderr)
            return 1
        print(f"claims.py: every command output in {a.doc} is what the tools print")
        return 0
    if new != old:
        with open(a.doc, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"claims.py: rewrote {a.doc}")
    else:
        print(f"claims.py: {a.doc} already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
