#!/usr/bin/env python3
"""The house kept by the test command: the layout of include/tensordict/ checked against
docs/house.json, the data docs/design.md's layer table is drawn from.

  scripts/house.py --check     # fails (exit 1) naming every breach
  scripts/house.py --write     # redraws docs/design.md's layer table from the data
  scripts/house.py --graph     # the arrows between layers, with the files that make them

A breach is
  - a header over the line limit (the generated ones aside);
  - a header no layer claims;
  - an include that runs from a lower layer to a higher one (a forwarder counts as the layer of
    the header it forwards to);
  - a moved header whose old path is not a one-line forwarder to its new one;
  - a file in the top-level detail/ that the data does not list as shared.
"""
import argparse
import fnmatch
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
LIB = INCLUDE / "tensordict"
DATA = ROOT / "docs" / "house.json"
DESIGN = ROOT / "docs" / "design.md"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def load():
    return json.loads(DATA.read_text())


def headers():
    return sorted(p.relative_to(LIB).as_posix() for p in LIB.rglob("*.hpp"))


def includes(rel):
    """The library's headers `rel` includes, as paths relative to include/tensordict/."""
    out = []
    text = (LIB / rel).read_text()
    for kind, name in INCLUDE_RE.findall(text):
        if kind == '"':
            target = (LIB / rel).parent / name
        elif name.startswith("tensordict/"):
            target = INCLUDE / name
        else:
            continue
        target = pathlib.Path(*_normalise(target.parts))
        try:
            out.append(target.relative_to(LIB).as_posix())
        except ValueError:
            continue
    return out


def _normalise(parts):
    out = []
    for p in parts:
        if p == "..":
            out.pop()
        elif p != ".":
            out.append(p)
    return out


def forwarder_target(rel):
    """The header a one-line forwarder includes, or None when `rel` is more than a forwarder."""
    code = []
    for line in (LIB / rel).read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("//") or s == "#pragma once":
            continue
        code.append(s)
    if len(code) != 1:
        return None
    inc = includes(rel)
    return inc[0] if len(inc) == 1 else None


def layer_of(data, rel, seen=None):
    """Index of the layer that claims `rel` (a forwarder: its target's), or None."""
    fwd = data["forwarders"].get(rel)
    if fwd is not None:
        seen = seen or set()
        if rel in seen:
            return None
        seen.add(rel)
        return layer_of(data, fwd, seen)
    for i, layer in enumerate(data["layers"]):
        if any(fnmatch.fnmatchcase(rel, g) for g in layer["files"]):
            return i
    return None


def check(data):
    problems = []
    limit = data["max_lines"]
    names = [l["name"] for l in data["layers"]]
    all_headers = headers()
    for rel in all_headers:
        generated = any(fnmatch.fnmatchcase(rel, g) for g in data["generated"])
        n = len((LIB / rel).read_text().splitlines())
        if n > limit and not generated:
            problems.append(f"{rel}: {n} lines, over the limit of {limit} (split it by concern)")
        if rel.startswith("detail/") and rel not in data["shared_detail"]:
            problems.append(f"{rel}: the top-level detail/ holds only the shared parts "
                            f"(docs/house.json, shared_detail); move it into its folder's detail/")
        me = layer_of(data, rel)
        if me is None:
            problems.append(f"{rel}: no layer of docs/house.json claims it")
            continue
        for inc in includes(rel):
            if not (LIB / inc).exists():
                problems.append(f"{rel}: includes {inc}, which does not exist")
                continue
            them = layer_of(data, inc)
            if them is None:
                continue  # reported on its own line
            if them > me:
                problems.append(f"{rel} ({names[me]}) includes {inc} ({names[them]}): "
                                f"a lower layer may not include a higher one")
    for old, new in data["forwarders"].items():
        if not (LIB / old).exists():
            problems.append(f"{old}: a moved header lost its forwarder (it should include {new})")
            continue
        target = forwarder_target(old)
        if target != new:
            problems.append(f"{old}: should be a one-line forwarder to {new}")
    return problems


def graph(data):
    names = [l["name"] for l in data["layers"]]
    arrows = {}
    for rel in headers():
        me = layer_of(data, rel)
        if me is None:
            continue
        for inc in includes(rel):
            them = layer_of(data, inc)
            if them is None or them == me:
                continue
            arrows.setdefault((names[me], names[them]), []).append(f"{rel} -> {inc}")
    for (a, b), files in sorted(arrows.items()):
        up = names.index(b) > names.index(a)
        print(f"{a} -> {b}{'   UP' if up else ''} ({len(files)})")
        if up:
            for f in files:
                print("    " + f)


TABLE_BEGIN = "<!-- layers: drawn by scripts/house.py --write from docs/house.json -->"
TABLE_END = "<!-- end of layers -->"


def table(data):
    rows = ["| layer | files | what it knows |", "|---|---|---|"]
    for l in data["layers"]:
        files = ", ".join(f"`{g}`" for g in l["files"])
        rows.append(f"| {l['name']} | {files} | {l['what']} |")
    return "\n".join(rows)


def write(data):
    text = DESIGN.read_text()
    begin, end = text.index(TABLE_BEGIN), text.index(TABLE_END)
    new = text[:begin] + TABLE_BEGIN + "\n" + table(data) + "\n" + text[end:]
    DESIGN.write_text(new)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--graph", action="store_true")
    a = ap.parse_args()
    data = load()
    if a.write:
        write(data)
    if a.graph:
        graph(data)
    if a.check:
        problems = check(data)
        text = DESIGN.read_text()
        if TABLE_BEGIN not in text or table(data) not in text:
            problems.append("docs/design.md: its layer table is not the one docs/house.json "
                            "draws (run scripts/house.py --write)")
        for p in problems:
            print(p)
        print(f"house: {len(headers())} headers, {len(problems)} problems")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
