#!/usr/bin/env python3
"""The repository stands alone: no file refers to a path outside it (the sibling folder our
own checkouts happen to have, an outside design document), and every relative link of every
Markdown file resolves to a file of the repository.

usage: standalone.py SOURCE_DIR"""
import os
import re
import subprocess
import sys

root = os.path.realpath(sys.argv[1])
# Spelled in pieces so that this file does not match itself.
OUTSIDE = [re.compile(p) for p in (r"\.\./" + "shared", r"\bshared/" + "ds_configs", "ARCHITECTURE" + r"\.md")]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def repository_files():
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


problems = []
files = repository_files()
for rel in files:
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue  # binary files say nothing about paths
    for n, line in enumerate(text.splitlines(), 1):
        for pattern in OUTSIDE:
            if pattern.search(line):
                problems.append(f"{rel}:{n}: refers outside the repository: {line.strip()[:120]}")
    if rel.endswith(".md"):
        for n, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                resolved = os.path.realpath(os.path.join(os.path.dirname(path), target))
                if not resolved.startswith(root + os.sep) and resolved != root:
                    problems.append(f"{rel}:{n}: link leaves the repository: {target}")
                elif not os.path.exists(resolved):
                    problems.append(f"{rel}:{n}: link to a missing file: {target}")

print(f"standalone: {len(files)} files checked, {len(problems)} problems")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
