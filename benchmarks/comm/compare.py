#!/usr/bin/env python3
# Runs `zero bench comm --transport tcp --json` (our Gloo TCP path) and gloo_direct_bench --json
# alternately ROUNDS times per world size under zerorun, keeps the best time of each (op, bytes)
# (robust to a busy machine) and prints one Markdown table: ours vs direct Gloo, busbw and our
# overhead in percent.
import argparse, json, re, subprocess, sys

p = argparse.ArgumentParser()
p.add_argument("--bin", default="build/bin", help="folder holding zerorun, zero, gloo_direct_bench")
p.add_argument("--worlds", default="2,4")
p.add_argument("--sizes", default="1M,16M,128M")
p.add_argument("--iters", default="10")
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--port", type=int, default=29650)
a = p.parse_args()

def run(world, cmd):
    full = [f"{a.bin}/zerorun", "--nproc_per_node", str(world), "--master_port", str(a.port), "--no_local_rank"] + cmd
    a.port += 1
    out = subprocess.run(full, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        line = re.sub(r"^\[rank \d+\] ", "", line)
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"no JSON from {' '.join(full)}:\n{out}")

rows = []
for world in [int(w) for w in a.worlds.split(",")]:
    best = {}
    for _ in range(a.rounds):
        for name, cmd in (("ours", [f"{a.bin}/zero", "bench", "comm", "--transport", "tcp"]), ("direct", [f"{a.bin}/gloo_direct_bench"])):
            doc = run(world, cmd + ["--sizes", a.sizes, "--iters", a.iters, "--json"])
            for r in doc["results"]:
                key = (name, r["op"], r["bytes"])
                if key not in best or r["time_us"] < best[key]["time_us"]:
                    best[key] = r
    for (name, op, nbytes), r in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if name != "ours":
            continue
        d = best[("direct", op, nbytes)]
        rows.append((world, op, nbytes, r["busbw_gbps"], d["busbw_gbps"], 100.0 * (r["time_us"] / d["time_us"] - 1.0)))

print("| ranks | op | size | ours busbw GB/s | direct Gloo busbw GB/s | our overhead |")
print("|---|---|---|---|---|---|")
for world, op, nbytes, ours, direct, over in rows:
    print(f"| {world} | {op} | {nbytes >> 20} MiB | {ours:.3f} | {direct:.3f} | {over:+.1f}% |")
