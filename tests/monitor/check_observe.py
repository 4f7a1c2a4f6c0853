#!/usr/bin/env python3
"""check_observe.py STDOUT_FILE STEPS EVERY RUNS: the wall_clock_breakdown lines of observe_worker
(RUNS engines of STEPS steps, steps_per_print EVERY): one per interval, naming its steps, with
DeepSpeed's timer names; min <= rank 0 <= max; fwd + bwd + step within 10% of the step time."""
import re
import sys

text, steps, every, runs = open(sys.argv[1]).read(), *map(int, sys.argv[2:5])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


names = ["fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "total"]  # always there
lines = [l for l in text.splitlines() if "time (ms) | fwd:" in l]
check(len(lines) == runs * steps // every, f"{len(lines)} breakdown lines")
check(all("stage3_gather_wait" not in l and "offload_copy" not in l for l in lines),
      "no gather waits or offload copies at stages 1-2 without offload")
intervals = []
for line in lines:
    t = {}
    for name in names:
        m = re.search(r"\| " + name + r": ([0-9.]+) \(([0-9.]+)\.\.([0-9.]+)\)", line)
        check(m is not None, f"{name} in {line}")
        if m:
            t[name] = tuple(float(x) for x in m.groups())
            check(t[name][1] <= t[name][0] + 0.011 and t[name][0] <= t[name][2] + 0.011,
                  f"{name}: rank 0 within min..max: {t[name]}")
    m = re.search(r"mean per step of steps (\d+)-(\d+), \(min\.\.max\) over (\d+) ranks", line)
    check(m is not None, f"interval in {line}")
    if m:
        intervals.append((int(m.group(1)), int(m.group(2))))
    if len(t) == len(names):
        parts = t["fwd"][0] + t["bwd"][0] + t["step"][0]
        check(abs(parts - t["total"][0]) <= 0.10 * t["total"][0],
              f"fwd + bwd + step = {parts} vs total {t['total'][0]}")
        check(t["bwd_inner"][0] + t["bwd_allreduce"][0] <= t["bwd"][0] + 0.02, "bwd's parts")
want = [(a, a + every - 1) for a in range(1, steps + 1, every)] * runs
check(intervals == want, f"intervals {intervals} vs {want}")
print("FAILED" if failures else "PASS", f"({len(lines)} breakdown lines)")
sys.exit(1 if failures else 0)
