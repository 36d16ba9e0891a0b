#!/usr/bin/env python3
"""Checks that every ```cpp block placed after `<!-- example: FILE -->` in docs/*.md appears
verbatim in FILE (a compiled, tested source), so the docs show code that runs."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
pattern = re.compile(r"<!-- example: (\S+) -->\s*```cpp\n(.*?)```", re.S)
failures, checked = [], 0
for md in sorted((root / "docs").glob("*.md")):
    text = md.read_text()
    for m in pattern.finditer(text):
        src = root / m.group(1)
        if not src.is_file():
            failures.append(f"{md.name}: example file {m.group(1)} does not exist")
            continue
        body = [l.strip() for l in src.read_text().splitlines()]
        snippet = [l.strip() for l in m.group(2).splitlines() if l.strip()]
        joined = "\n".join(l for l in body if l)
        checked += 1
        if "\n".join(snippet) not in joined:
            failures.append(f"{md.name}: a snippet is not in {m.group(1)}:\n  " + "\n  ".join(snippet[:3]))
for f in failures:
    print(f)
print(f"{checked - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures or checked == 0 else 0)
