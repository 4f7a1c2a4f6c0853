#!/usr/bin/env python3
"""run_documented.py SRC_DIR BUILD_DIR PORT: runs every shell command the documentation marks
runnable, and every example in the --help texts of zero (each command), zerorun and gpt_train,
so that a documented command can never fail silently.

The marker: an HTML comment on the line before a fenced block of README.md or docs/*.md,
    <!-- runnable -->
    <!-- runnable; short: --steps 150 => --steps 12; skip: scripts/test.sh -->
"short: A => B" replaces A by B (a shorter run of a command that trains for minutes), "skip: X"
drops the lines holding X (scripts/test.sh: the test suite cannot run itself). Every block runs
with bash -euo pipefail, in order, in one scratch directory that mirrors the source tree (its
docs/ is a fresh directory, so a command writing docs/monitoring_gpt.svg writes there), with
BUILD_DIR set and build/bin first on PATH. Also, for every command: "/tmp/" becomes the scratch
directory's tmp/ (runs do not collide), and each zerorun gets its own --master_port from PORT on.
Help examples are the indented lines of a --help text that start with zero, zerorun or
gpt_train and are not a synopsis (no "[", no upper-case placeholder such as DIR or FILE); they
run after the blocks (in the same directory, so they may use what the blocks
made), with the same rules and these short forms: kHelpShort below."""
import os
import re
import subprocess
import sys
import tempfile

src, build, port = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), int(sys.argv[3])
kTools = ("zero", "zerorun", "gpt_train")
kHelpShort = [("--sizes 1M,16M,128M", "--sizes 1M --iters 2 --warmup 1")]
kMarker = re.compile(r"^<!--\s*runnable\b(.*?)-->\s*$")
failures = []


def documented_blocks():
    files = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
    for path in files:
        lines = open(path).read().splitlines()
        for i, line in enumerate(lines):
            m = kMarker.match(line.strip())
            if not m:
                continue
            where = f"{os.path.relpath(path, src)}:{i + 1}"
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                failures.append(f"{where}: the runnable marker is not followed by a fenced block")
                continue
            end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                failures.append(f"{where}: unterminated block")
                continue
            short, skip = [], []
            for option in filter(None, (o.strip() for o in m.group(1).split(";"))):
                if option.startswith("short:") and "=>" in option:
                    a, b = option[len("short:"):].split("=>", 1)
                    short.append((a.strip(), b.strip()))
                elif option.startswith("skip:"):
                    skip.append(option[len("skip:"):].strip())
                else:
                    failures.append(f"{where}: unknown marker option '{option}'")
            body = "\n".join(lines[i + 2:end])
            for a, b in short:
                if a not in body:
                    failures.append(f"{where}: short form '{a}' does not occur in the block")
                body = body.replace(a, b)
            body = "\n".join(l for l in body.splitlines() if not any(x in l for x in skip))
            yield where, body


def help_examples():
    env = environment()
    def text_of(args):
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
        return r.stdout + r.stderr
    texts = {"zero --help": text_of(["zero", "--help"]),
             "zerorun --help": text_of(["zerorun", "--help"]),
             "gpt_train --help": text_of(["gpt_train", "--help"])}
    # zero's command list: a "  NAME" line (two spaces) per command, its summary indented more.
    listed = texts["zero --help"].split("commands:", 1)[-1]
    names = re.findall(r"^  (\S.*?)\s*$", listed, re.M)
    if not names:
        failures.append("zero --help lists no command")
    for name in names:
        texts[f"zero {name} --help"] = text_of(["zero", *name.split(), "--help"])
    for where, text in texts.items():
        for line in text.splitlines():
            stripped = line.strip()
            words = stripped.split()
            synopsis = "[" in stripped or any(re.fullmatch(r"[A-Z][A-Z_]+", w) for w in words)
            if line[:1].isspace() and words and words[0] in kTools and not synopsis:
                for a, b in kHelpShort:
                    stripped = stripped.replace(a, b)
                yield where, stripped


def environment():
    env = dict(os.environ)
    env["BUILD_DIR"] = build
    env["PATH"] = os.path.join(build, "bin") + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def adapt(command, scratch):
    """Per-run rules: /tmp/ -> scratch/tmp/, each zerorun on its own port."""
    global port
    command = command.replace("/tmp/", os.path.join(scratch, "tmp") + "/")
    def zerorun(m):
        global port
        port += 1
        return m.group(0) + f" --master_port {port}"
    command = re.sub(r"--master_port \d+ ?", "", command)
    return re.sub(r"(?:^|(?<=[\s/]))zerorun(?= )", zerorun, command)


def run(where, command, scratch):
    command = adapt(command, scratch)
    print(f"== {where}\n{command}", flush=True)
    try:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=scratch,
                           env=environment(), capture_output=True, text=True, timeout=600)
        ok, out = r.returncode == 0, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        ok, out = False, f"timed out after {e.timeout} s"
    tail = "\n".join(out.splitlines()[-15:])
    print(("ok" if ok else "FAILED") + ("" if ok else "\n" + tail), flush=True)
    if not ok:
        failures.append(f"{where}: {command.splitlines()[0]} ...")


with tempfile.TemporaryDirectory(prefix="zero_docs.") as scratch:
    for entry in os.listdir(src):
        if entry in ("docs", "build", ".git") or entry.startswith("build"):
            continue
        os.symlink(os.path.join(src, entry), os.path.join(scratch, entry))
    os.symlink(build, os.path.join(scratch, "build"))
    os.mkdir(os.path.join(scratch, "docs"))
    os.mkdir(os.path.join(scratch, "tmp"))
    blocks = list(documented_blocks())
    if not blocks:
        failures.append("no block is marked runnable")
    for where, body in blocks:
        run(where, body, scratch)
    examples = list(help_examples())
    for where, command in examples:
        run(where, command, scratch)
    print(f"{len(blocks)} documented blocks, {len(examples)} help examples")

for f in failures:
    print("FAIL:", f)
print("FAILED" if failures else "PASS")
sys.exit(1 if failures else 0)
