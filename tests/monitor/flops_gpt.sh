#!/usr/bin/env bash
# flops_gpt.sh ZERORUN GPT_TRAIN PORT: the example GPT on 2 ranks at ZeRO stage 3 with the flops
# profiler at step 2 (output_file); its matmul flops must equal the analytic count (2 x dense
# weights x tokens + attention's two T x T x d products per layer) within 2%, and its module
# table must name the zero::Sharded blocks.
set -euo pipefail
zerorun=$1; train=$2; port=$3
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zero_flops.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$src/examples/gpt/ds_config_stage3.json" "$tmp" > "$tmp/ds_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train_micro_batch_size_per_gpu"] = 3
c["gradient_accumulation_steps"] = 1
c["steps_per_print"] = 2
c["flops_profiler"] = {"enabled": True, "profile_step": 2, "module_depth": -1, "top_modules": 2,
                       "detailed": True, "output_file": sys.argv[2] + "/flops.txt"}
print(json.dumps(c, indent=2))
PY
"$zerorun" --nproc_per_node 2 --master_port "$port" "$train" --deepspeed_config "$tmp/ds_config.json" \
  --steps 4 --n-layer 2 --d-model 64 --n-head 4 --context 32 > "$tmp/stdout" 2>&1 || { cat "$tmp/stdout"; exit 1; }
cat "$tmp/stdout" "$tmp/flops.txt"
/usr/bin/python3 - "$tmp/stdout" "$tmp/flops.txt" <<'PY'
import re, sys
out, report = open(sys.argv[1]).read(), open(sys.argv[2]).read()
vocab = int(re.search(r"vocab (\d+)\)", out).group(1))
B, T, d, L, V = 3, 32, 64, 2, vocab
analytic = B * (2 * T * (12 * L * d * d + V * d) + 4 * L * T * T * d)
measured = int(re.search(r"fwd matmul flops per GPU \(exact\):\s+(\d+)", report).group(1))
ok = measured == analytic  # both count 2 flops per multiply-accumulate of the same matrices
print(f"matmul flops: measured {measured}, analytic {analytic}, {100 * (measured / analytic - 1):+.3f}%")
checks = {
    "matmul flops equal the analytic count": ok,
    "profiled step 2": "Profile Summary at step 2:" in report,
    "blocks in the module table": "'blocks.0'" in report and "'blocks.1'" in report,
    "operator table": re.search(r"aten::(addmm|mm)\s+\d+", report) is not None,
    "attention bmm": re.search(r"aten::bmm\s+\d+", report) is not None,
    "achieved FLOPS": re.search(r"FLOPS per GPU = 3 \* fwd flops per GPU / iter latency:\s+[0-9.]+ \w*FLOPS", report) is not None,
}
for what, good in checks.items():
    print(("PASS " if good else "FAIL ") + what)
sys.exit(0 if all(checks.values()) else 1)
PY
