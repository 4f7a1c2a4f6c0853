#!/usr/bin/env bash
# gpt_zeropp_check.sh ZERORUN GPT_TRAIN CONFIG PORT STEPS: the example GPT on 4 ranks at ZeRO
# stage 3, as it is and with ZeRO++'s hpZ (zero_hpz_partition_size 2), qwZ
# (zero_quantized_weights) and both; prints their losses side by side (a markdown table, every
# 5th step) and checks that hpZ trains exactly stage 3's model (the same loss at every step to
# the last printed digit, the same final loss), qwZ + hpZ exactly qwZ's, and qwZ's mean loss
# over the last 10 steps is within 1% of stage 3's (one batch's loss is noisier than qwZ's
# effect).
set -euo pipefail
zerorun=$1 train=$2 config=$3 port=$4 steps=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=("stage 3" "+ hpZ 2" "+ qwZ" "+ qwZ + hpZ 2")
flags=("" "--set zero_optimization.zero_hpz_partition_size=2"
  "--set zero_optimization.zero_quantized_weights=true"
  "--set zero_optimization.zero_quantized_weights=true --set zero_optimization.zero_hpz_partition_size=2")
for i in 0 1 2 3; do
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node 4 --master_port "$port" --no_local_rank "$train" \
    --deepspeed_config "$config" --steps "$steps" --set steps_per_print=1 ${flags[$i]} \
    --json_summary >"$tmp/$i.log" 2>&1 || { cat "$tmp/$i.log"; echo "FAIL: ${names[$i]} run"; exit 1; }
  grep -q "gpt_train: done, $steps optimizer steps" "$tmp/$i.log" ||
    { cat "$tmp/$i.log"; echo "FAIL: ${names[$i]} did not finish"; exit 1; }
  grep -oP '\[rank 0\] step=\K[0-9]+(?=, )' "$tmp/$i.log" >"$tmp/$i.steps"
  grep -oP '\[rank 0\] step=[0-9]+, .*?loss=\K[0-9.]+' "$tmp/$i.log" >"$tmp/$i.loss"
  grep -oP '"final_loss": \K[0-9.e+-]+' "$tmp/$i.log" | tail -1 >"$tmp/$i.final"
done
grep -q "zero++=\[hpZ 2\]" "$tmp/1.log" || { echo "FAIL: the progress line does not show hpZ"; exit 1; }
grep -q "zero++=\[hpZ 2, qwZ\]" "$tmp/3.log" || { echo "FAIL: the progress line does not show both"; exit 1; }
echo "| step | ${names[0]} | ${names[1]} | ${names[2]} | ${names[3]} |"
echo "|---|---|---|---|---|"
paste "$tmp/0.steps" "$tmp/0.loss" "$tmp/1.loss" "$tmp/2.loss" "$tmp/3.loss" |
  awk '$1 % 5 == 0 { printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
echo "| final | $(cat "$tmp/0.final") | $(cat "$tmp/1.final") | $(cat "$tmp/2.final") | $(cat "$tmp/3.final") |"
cmp -s "$tmp/0.loss" "$tmp/1.loss" && cmp -s "$tmp/0.final" "$tmp/1.final" ||
  { echo "FAIL: hpZ's losses differ from stage 3's"; exit 1; }
cmp -s "$tmp/2.loss" "$tmp/3.loss" && cmp -s "$tmp/2.final" "$tmp/3.final" ||
  { echo "FAIL: qwZ + hpZ's losses differ from qwZ's"; exit 1; }
paste "$tmp/0.loss" "$tmp/2.loss" | tail -10 |
  awk '{ a += $1; b += $2 } END { d = (b - a) / a; if (d < 0) d = -d
         printf "mean loss of the last 10 steps: stage 3 %.4f, qwZ %.4f (%.2f%% apart)\n", a / NR, b / NR, 100 * d
         exit !(NR == 10 && d < 0.01) }' ||
  { echo "FAIL: qwZ's mean loss over the last 10 steps is not within 1% of stage 3's"; exit 1; }
echo "gpt zeropp: passed"
