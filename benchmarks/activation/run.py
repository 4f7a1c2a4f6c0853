#!/usr/bin/env python3
"""The activation checkpointing table of README.md: bin/act_bench under zerorun for each
(ranks, stage, mode), one warm-up step and the steps after it (ARGS="--steps N": times are the
mean over steps 2..N, memory is the last step), and the formulas each column is held against. Environment: BUILD_DIR (build), RANKS ("2 4"), STAGES ("0 3"),
MODES ("none ckpt cpu"), ARGS (extra act_bench arguments, e.g. "--n-layer 2" for a quick look),
PORT (first port, 30160). Prints the memory table, the time table, and the JSON lines."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))
MIB = 1024.0 * 1024.0


def run(world, stage, mode, port):
    cmd = [os.path.join(BUILD, "bin", "zerorun"), "--nproc_per_node", str(world), "--master_port",
           str(port), "--no_local_rank", os.path.join(BUILD, "bin", "act_bench"), "--stage",
           str(stage), "--mode", mode, "--data",
           os.path.join(ROOT, "examples/gpt/data/kjv_genesis_exodus.txt")]
    cmd += os.environ.get("ARGS", "").split()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    # zerorun prefixes each line with "[rank N] ".
    rows = [json.loads(l[l.index("{"):]) for l in out.stdout.splitlines() if '{"rank"' in l]
    if out.returncode != 0 or len(rows) != world:
        sys.exit(f"act_bench failed ({' '.join(cmd)}):\n{out.stdout}\n{out.stderr}")
    return sorted(rows, key=lambda r: r["rank"])


def block_activation_bytes(r):
    """What one pre-norm block saves for backward in fp32, without dropout: inputs of ln1, qkv,
    proj, ln2, fc (5 x BTC), the qkv output that q, k, v view (3 x BTC), the GELU input and the
    fc_proj input (2 x 4 BTC), and the softmax output (B heads T T)."""
    btc = r["micro"] * r["context"] * r["d_model"]
    return 4 * (16 * btc + r["micro"] * r["heads"] * r["context"] ** 2)


def head_activation_bytes(r):
    """Outside the blocks: ln_f's input and output (2 x BTC), logits and log-softmax (2 x BTV)."""
    bt = r["micro"] * r["context"]
    return 4 * (2 * bt * r["d_model"] + 2 * bt * r["vocab"])


def activation_formula(r):
    bt_c = 4 * r["micro"] * r["context"] * r["d_model"]
    if r["mode"] == "none":
        return r["layers"] * block_activation_bytes(r) + head_activation_bytes(r)
    # One saved input per block, plus one block's activations while it is recomputed.
    return r["layers"] * bt_c + block_activation_bytes(r) + head_activation_bytes(r)


def states_formula(r):
    psi = r["params"]
    return 16 * psi if r["stage"] == 0 else 16 * psi / r["world"]


def main():
    ranks = [int(x) for x in os.environ.get("RANKS", "2 4").split()]
    stages = [int(x) for x in os.environ.get("STAGES", "0 3").split()]
    modes = os.environ.get("MODES", "none ckpt cpu").split()
    port = int(os.environ.get("PORT", "30160"))
    results = []
    for world in ranks:
        for stage in stages:
            for mode in modes:
                results.append(run(world, stage, mode, port))
                port += 1
                r = results[-1][0]
                print(f"# done: {world} ranks, stage {stage}, {mode}: "
                      f"{r['forward_s'] + r['backward_s']:.2f} s fwd+bwd", file=sys.stderr)
    # The README's table as it appears: stage 3's formula column adds the gathered block in front.
    print("| ranks | stage | checkpointing | peak RSS MiB | model states MiB (formula) | gathered peak MiB "
          "| checkpointed inputs MiB (formula) | torch step peak MiB | activations formula MiB | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rows in results:
        r = max(rows, key=lambda x: x["peak_rss_bytes"])
        mode = {"none": "off", "ckpt": "on", "cpu": "on + cpu_checkpointing"}[r["mode"]]
        ckpt_formula = 0 if r["mode"] == "none" else r["layers"] * 4 * r["micro"] * r["context"] * r["d_model"]
        gathered = r["peak_gathered_bytes"] if r["stage"] == 3 else 0
        act_f = activation_formula(r)
        gap = r["torch_step_peak_bytes"] - gathered - act_f
        stage3 = r["stage"] == 3
        formula = f"{gathered / MIB:.0f} + {act_f / MIB:.0f}" if stage3 else f"{act_f / MIB:.0f}"
        inputs = ("0 (0)" if r["mode"] == "none" else
                  f"{(r['act_peak_bytes'] + r['act_host_peak_bytes']) / MIB:.1f} ({ckpt_formula / MIB:.1f})")
        gathered_cell = f"{gathered / MIB:.0f}" if stage3 else "-"
        print(f"| {r['world']} | {r['stage']} | {mode} | {r['peak_rss_bytes'] / MIB:.0f} | "
              f"{r['model_states_bytes'] / MIB:.0f} ({states_formula(r) / MIB:.0f}) | {gathered_cell} | "
              f"{inputs} | {r['torch_step_peak_bytes'] / MIB:.0f} | {formula} | "
              f"{gap / MIB:+.0f} ({100.0 * gap / act_f:+.0f}%) |")
    print()
    print("| ranks | stage | checkpointing | forward s | backward s | of which recompute s | fwd+bwd s "
          "| overhead vs off | one extra forward (analytic) | ours / analytic | recompute / off's fwd+bwd "
          "| recompute / analytic |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = {}
    for rows in results:
        r = rows[0]
        key = (r["world"], r["stage"])
        fb = r["forward_s"] + r["backward_s"]
        if r["mode"] == "none":
            base[key] = r
        b = base.get(key)
        over = f"{100.0 * (fb / (b['forward_s'] + b['backward_s']) - 1):+.1f}%" if b else "-"
        analytic = 100.0 * b["forward_s"] / (b["forward_s"] + b["backward_s"]) if b else None
        ratio = ((fb / (b["forward_s"] + b["backward_s"]) - 1) * 100 / analytic
                 if b and r["mode"] != "none" else None)
        # The recompute alone against the same analytic figure: the wall-clock overhead also holds
        # whatever else checkpointing changes (a backward over less live memory runs faster).
        rec = (100.0 * r["recompute_s"] / (b["forward_s"] + b["backward_s"])
               if b and r["mode"] != "none" else None)
        mode = {"none": "off", "ckpt": "on", "cpu": "on + cpu"}[r["mode"]]
        print(f"| {r['world']} | {r['stage']} | {mode} | {r['forward_s']:.2f} | {r['backward_s']:.2f} | "
              f"{r['recompute_s']:.2f} | {fb:.2f} | {over} | "
              f"{'+%.1f%%' % analytic if analytic is not None else '-'} | "
              f"{'%.2f' % ratio if ratio is not None else '-'} | "
              f"{'+%.1f%%' % rec if rec is not None else '-'} | "
              f"{'%.2f' % (rec / analytic) if rec is not None else '-'} |")
    print()
    for rows in results:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
