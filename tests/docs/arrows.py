#!/usr/bin/env python3
"""The folder arrows of docs/design.md: each component folder (with its public headers in
include/zero/<folder>/) includes only the project folders it may use. Also: the folders that
must build without LibTorch do not include it.

usage: arrows.py SOURCE_DIR"""
import os
import re
import sys

root = sys.argv[1]
ALLOWED = {
    "config": set(),
    "kernels": set(),
    "comm": {"kernels"},
    "tp": {"comm"},
    "checkpoint": set(),
    "core": {"comm", "kernels"},
    "offload": {"core", "kernels"},
    "monitor": {"checkpoint"},
    "engine": {"config", "kernels", "comm", "tp", "checkpoint", "core", "offload", "monitor"},
    "launcher": set(),
    "tools": {"config", "kernels", "comm", "tp", "checkpoint", "core", "offload", "monitor",
              "engine"},
}
NO_TORCH = {"config", "launcher"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
TORCH = re.compile(r"^(torch/|ATen/|c10/)")


def sources(folder):
    for base in (os.path.join(root, folder), os.path.join(root, "include", "zero", folder)):
        for d, _, names in os.walk(base):
            for n in names:
                if n.endswith((".h", ".hpp", ".cpp", ".cu", ".cuh")):
                    yield os.path.join(d, n)


def used_folder(path, target):
    """The project folder an include reaches, or None: <zero/F/...>, the umbrella <zero/zero.h>
    (which includes the engine and so everything), and quoted paths such as "../engine/x.h"
    resolved from the including file."""
    if target == "zero/zero.h":
        return "engine"
    m = re.match(r"^zero/([a-z_]+)/", target)
    if m:
        return m.group(1)
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    if not os.path.isfile(resolved):
        return None
    parts = os.path.relpath(resolved, root).split(os.sep)
    if parts[:2] == ["include", "zero"] and len(parts) > 3:
        return parts[2]
    return parts[0] if parts[0] in ALLOWED else None


problems = []
checked = 0
for folder, allowed in ALLOWED.items():
    for path in sources(folder):
        checked += 1
        rel = os.path.relpath(path, root)
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            used = used_folder(path, target)
            if used and used != folder and used not in allowed:
                problems.append(f"{rel}:{n}: {folder}/ may not use {used}/ ({target})")
            if folder in NO_TORCH and TORCH.match(target):
                problems.append(f"{rel}:{n}: {folder}/ builds without LibTorch ({target})")
print(f"arrows: {checked} files checked, {len(problems)} forbidden includes")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
