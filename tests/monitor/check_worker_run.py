#!/usr/bin/env python3
"""check_worker_run.py PROTO_PY_DIR OUT_DIR: every event monitor_worker expected is in the CSV
files with exactly that value (Python's float() of the repr) at that step, and in the TensorBoard
file as that value rounded to float32; the loss scale and skipped steps move as the injected
overflow makes them."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_tfevents  # noqa: E402

proto_dir, out = sys.argv[1:3]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


expected = {}
for line in open(os.path.join(out, "expected.jsonl")):
    e = json.loads(line)
    expected.setdefault(e["tag"], []).append((e["step"], e["value"]))

csv_dir = os.path.join(out, "csv", "job")
csv = {}
for name in os.listdir(csv_dir):
    rows = open(os.path.join(csv_dir, name), newline="").read().split("\r\n")
    tag = "Train/Samples/" + rows[0].split(",")[1]
    check(name == tag.replace("/", "_") + ".csv", f"{name}: DeepSpeed's file name for {tag}")
    csv[tag] = [(int(s), float(v)) for s, v in (r.split(",") for r in rows[1:] if r)]
timing = ["Train/Samples/" + t for t in ("samples_per_sec", "step_time_ms", "time_fwd_ms",
                                          "time_bwd_ms", "time_bwd_inner_ms",
                                          "time_bwd_allreduce_ms", "time_step_ms")]
check(sorted(csv) == sorted(list(expected) + timing), f"CSV events {sorted(csv)}")
for k, (s, total) in enumerate(csv.get("Train/Samples/step_time_ms", [])):
    parts = sum(csv["Train/Samples/time_" + p + "_ms"][k][1] for p in ("fwd", "bwd", "step"))
    check(abs(parts - total) <= 0.10 * total, f"step {k + 1}: fwd + bwd + step {parts} vs {total}")
for tag, points in expected.items():
    check(csv.get(tag) == points, f"{tag}: CSV {csv.get(tag)} != expected {points}")

tb_files = os.listdir(os.path.join(out, "tb", "job"))
check(len(tb_files) == 1, f"one event file: {tb_files}")
tb = {}
for e in read_tfevents.events(proto_dir, os.path.join(out, "tb", "job", tb_files[0]))[1:]:
    tb.setdefault(e["tag"], []).append((e["step"], e["value"]))
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
for tag, points in expected.items():
    check(tb.get(tag) == [(s, f32(v)) for s, v in points], f"{tag}: TensorBoard values")

scale = [v for _, v in expected["Train/Samples/loss_scale"]]
skipped = [v for _, v in expected["Train/Samples/skipped_steps"]]
poison = 4  # monitor_worker's kPoisonStep
check(scale[0] == 256.0 and scale[poison] == scale[poison - 1] / 2 and max(scale) == 512.0,
      f"loss scale 2^8, doubled after 3 clean steps, halved by the overflow: {scale}")
check(skipped == [0.0] * poison + [1.0] * (len(skipped) - poison), f"skipped steps: {skipped}")
print("FAILED" if failures else "PASS", f"({sum(len(p) for p in expected.values())} events)")
sys.exit(1 if failures else 0)
