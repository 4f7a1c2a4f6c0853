#!/usr/bin/env python3
"""elastic_samples.py REF_DIR RUN_DIR STEPS: the samples each optimizer step trained on (the
elastic worker's samples_<restart>_<rank>.txt logs; a step trained again after a restart counts
from the last restart that trained it) are exactly the uninterrupted run's, for every step.
Prints how many steps were checked and how many were trained twice (lost to a failure)."""
import collections
import glob
import os
import re
import sys


def steps_of(folder):
    by_restart = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in glob.glob(os.path.join(folder, "samples_*_*.txt")):
        restart = int(re.match(r"samples_(\d+)_\d+\.txt", os.path.basename(path)).group(1))
        for line in open(path):
            step, index = map(int, line.split())
            by_restart[restart][step].append(index)
    final, retrained = {}, 0
    for restart in sorted(by_restart):
        for step, indices in by_restart[restart].items():
            retrained += step in final
            final[step] = sorted(indices)
    return final, retrained, sorted(by_restart)


ref, _, _ = steps_of(sys.argv[1])
run, retrained, restarts = steps_of(sys.argv[2])
steps = int(sys.argv[3])
bad = [s for s in range(steps) if run.get(s) != ref.get(s) or ref.get(s) is None]
for s in bad[:5]:
    print(f"step {s}: trained on {run.get(s)}, the uninterrupted run on {ref.get(s)}")
print(f"samples of {steps} steps (launches {restarts}, {retrained} step(s) trained again after a "
      f"restart): {'the uninterrupted run' + chr(39) + 's exactly' if not bad else f'{len(bad)} differ'}")
sys.exit(1 if bad else 0)
