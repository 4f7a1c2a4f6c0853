#!/usr/bin/env python3
"""The folders that must build without LibTorch include none of its headers, directly or through
any header of ours they include (the include graph, followed to the end).

    torch_free.py SOURCE_DIR FOLDER...

Exit 1 naming each path from a file of FOLDER to a LibTorch header."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
TORCH = re.compile(r'^(torch|ATen|c10|caffe2)/')
SOURCES = ('.cpp', '.cc', '.h', '.hpp', '.cu', '.cuh')


def resolve(root, here, name):
    for base in (os.path.dirname(here), os.path.join(root, 'include')):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(path):
            return path
    return None  # a system header


def main():
    root, folders = sys.argv[1], sys.argv[2:]
    files = []
    for folder in folders:
        top = os.path.join(root, folder)
        if not os.path.exists(top):
            print(f'torch_free: {folder} does not exist')
            return 1
        if os.path.isfile(top):
            files.append(top)
            continue
        for dirpath, _, names in os.walk(top):
            files += [os.path.join(dirpath, n) for n in names if n.endswith(SOURCES)]
    problems = []
    for start in sorted(files):
        seen, stack = set(), [(start, [start])]
        while stack:
            path, chain = stack.pop()
            if path in seen:
                continue
            seen.add(path)
            with open(path, encoding='utf-8', errors='replace') as f:
                text = f.read()
            for name in INCLUDE.findall(text):
                if TORCH.match(name):
                    rel = [os.path.relpath(p, root) for p in chain]
                    problems.append(' -> '.join(rel + [f'<{name}>']))
                    continue
                target = resolve(root, path, name)
                if target:
                    stack.append((target, chain + [target]))
    for p in problems:
        print('includes LibTorch:', p)
    print(f'torch_free: {len(files)} files of {", ".join(folders)}: '
          f'{len(problems)} reach LibTorch')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
