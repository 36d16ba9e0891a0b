#!/usr/bin/env python3
"""Checks that every ```cpp block placed after a visible source line, "From [`examples/F.cpp`]
(examples/F.cpp), compiled and run by the tests:", in docs/*.md appears verbatim in docs/
examples/F.cpp (a compiled, tested source), so the docs show code that runs and a reader is one
click from the definitions around it. A ```cpp block with no source line must be complete."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
pattern = re.compile(
    r"From \[`(\S+)`\]\((\S+)\), compiled and run by the tests:\s*```cpp\n(.*?)```", re.S)
failures, checked = [], 0
for md in sorted((root / "docs").glob("*.md")):
    text = md.read_text()
    for m in pattern.finditer(text):
        if m.group(1) != m.group(2):
            failures.append(f"{md.name}: the source line names {m.group(1)} but links {m.group(2)}")
            continue
        src = root / "docs" / m.group(1)
        if not src.is_file():
            failures.append(f"{md.name}: example file docs/{m.group(1)} does not exist")
            continue
        body = [l.strip() for l in src.read_text().splitlines()]
        snippet = [l.strip() for l in m.group(3).splitlines() if l.strip()]
        joined = "\n".join(l for l in body if l)
        checked += 1
        if "\n".join(snippet) not in joined:
            failures.append(f"{md.name}: a snippet is not in docs/{m.group(1)}:\n  " + "\n  ".join(snippet[:3]))
for f in failures:
    print(f)
print(f"{checked - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures or checked == 0 else 0)
