#!/usr/bin/env bash
# gpt_monitors.sh ZERORUN GPT_TRAIN ZERO PROTO_PY_DIR PORT: the example GPT on 2 ranks (stage 2,
# accumulation 2) with csv_monitor and tensorboard; check_gpt_run.py reads the files back. Then
# `zero plot` of the run and a second, altered copy, rendered by rsvg-convert and checked.
set -euo pipefail
zerorun=$1; train=$2; zero=$3; proto=$4; port=$5
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zero_monitor.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
steps=12
/usr/bin/python3 - "$src/examples/gpt/ds_config_stage2.json" "$tmp" > "$tmp/ds_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["gradient_accumulation_steps"] = 2
c["train_micro_batch_size_per_gpu"] = 4
c["steps_per_print"] = 5
c["csv_monitor"] = {"enabled": True, "output_path": sys.argv[2] + "/csv", "job_name": "gpt"}
c["tensorboard"] = {"enabled": True, "output_path": sys.argv[2] + "/tb", "job_name": "gpt"}
print(json.dumps(c, indent=2))
PY
started_ns=$(date +%s%N)
"$zerorun" --nproc_per_node 2 --master_port "$port" "$train" --deepspeed_config "$tmp/ds_config.json" \
  --steps $steps --n-layer 2 --d-model 64 --context 32 --json_summary > "$tmp/stdout" 2>&1 || { cat "$tmp/stdout"; exit 1; }
wall_ms=$((($(date +%s%N) - started_ns) / 1000000))  # the job's wall time, measured outside it
cat "$tmp/stdout"
# 4 per micro batch x 2 accumulation x 2 ranks = 16 samples per step
/usr/bin/python3 "$here/check_gpt_run.py" "$proto" "$tmp/csv/gpt" "$tmp/tb/gpt" "$tmp/stdout" $steps 16 "$wall_ms"

command -v rsvg-convert >/dev/null || { echo "rsvg-convert missing (apt-get install librsvg2-bin)"; exit 1; }
cp -r "$tmp/csv/gpt" "$tmp/csv/other"
/usr/bin/python3 - "$tmp/csv/other/Train_Samples_train_loss.csv" <<'PY'
import sys
rows = open(sys.argv[1], newline="").read().split("\r\n")
out = [rows[0]] + [f"{s},{float(v) * 1.2}" for s, v in (r.split(",") for r in rows[1:] if r)]
open(sys.argv[1], "w", newline="").write("\r\n".join(out) + "\r\n")
PY
"$zero" plot "$tmp/csv/gpt" "$tmp/csv/other" --out "$tmp/plot.svg"
rsvg-convert -o "$tmp/plot.png" "$tmp/plot.svg"
/usr/bin/python3 "$here/check_png.py" "$tmp/plot.png" "#1f77b4" "#d62728"
for panel in "memory per rank (MiB)" "step time split (ms)" "throughput (tokens/s)" "achieved TFLOPS per rank"; do
  grep -qF ">$panel</text>" "$tmp/plot.svg" || { echo "FAIL: no panel '$panel'"; exit 1; }
done
"$zero" plot "$tmp/csv/gpt" "$tmp/csv/other" --out "$tmp/plot.html"
head -c 15 "$tmp/plot.html" | grep -q "<!DOCTYPE html>" || { echo "FAIL: not HTML"; exit 1; }
# The page holds the same SVG inline: cut it out and render it too.
/usr/bin/python3 - "$tmp/plot.html" "$tmp/inline.svg" <<'PY'
import sys
html = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(html[html.index("<svg"):html.index("</svg>") + len("</svg>")])
PY
rsvg-convert -o "$tmp/inline.png" "$tmp/inline.svg"
/usr/bin/python3 "$here/check_png.py" "$tmp/inline.png" "#1f77b4" "#d62728"
echo "PASS"
