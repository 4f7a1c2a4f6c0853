#!/usr/bin/env bash
# gpt_zeropp_check.sh ZERORUN GPT_TRAIN CONFIG PORT STEPS: the example GPT on 4 ranks at ZeRO
# stage 3, its ranks split into 2 emulated hosts of 2 (CROSS_RANK, the launcher's node index that
# host discovery reads), as it is and with ZeRO++'s hpZ (zero_hpz_partition_size 2), qwZ
# (zero_quantized_weights), qgZ (zero_quantized_gradients), qwZ + hpZ, all three, and MiCS
# (mics_shard_size 2: a shard group per host); prints their losses side by side (a markdown
# table, every 5th step) and checks that hpZ trains exactly stage 3's model (the same loss at
# every step to the last printed digit, the same final loss), qwZ + hpZ exactly qwZ's, and the
# mean loss over the last 10 steps of qwZ, qgZ, all three and MiCS within 1%, 2%, 5% and 0.5% of
# stage 3's (one batch's loss is noisier than the quantization's effect; MiCS averages the same
# gradients in another order).
set -euo pipefail
zerorun=$1 train=$2 config=$3 port=$4 steps=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hpz="--set zero_optimization.zero_hpz_partition_size=2"
qwz="--set zero_optimization.zero_quantized_weights=true"
qgz="--set zero_optimization.zero_quantized_gradients=true"
mics="--set zero_optimization.mics_shard_size=2"
names=("stage 3" "+ hpZ" "+ qwZ" "+ qwZ + hpZ" "+ qgZ" "+ hpZ + qwZ + qgZ" "MiCS 2")
flags=("" "$hpz" "$qwz" "$qwz $hpz" "$qgz" "$hpz $qwz $qgz" "$mics")
# What each one's progress line shows.
shows=("" "zero++=[hpZ 2]" "zero++=[qwZ]" "zero++=[hpZ 2, qwZ]" "zero++=[qgZ]" "zero++=[hpZ 2, qwZ, qgZ]"
  "mics=2x2")
for i in "${!names[@]}"; do
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$zerorun" --nproc_per_node 4 --master_port "$port" --no_local_rank \
    bash -c 'CROSS_RANK=$((RANK / 2)) exec "$@"' - "$train" \
    --deepspeed_config "$config" --steps "$steps" --set steps_per_print=1 ${flags[$i]} \
    --json_summary >"$tmp/$i.log" 2>&1 || { cat "$tmp/$i.log"; echo "FAIL: ${names[$i]} run"; exit 1; }
  grep -q "gpt_train: done, $steps optimizer steps" "$tmp/$i.log" ||
    { cat "$tmp/$i.log"; echo "FAIL: ${names[$i]} did not finish"; exit 1; }
  [ -z "${shows[$i]}" ] || grep -qF "${shows[$i]}" "$tmp/$i.log" ||
    { echo "FAIL: the progress line of '${names[$i]}' does not show ${shows[$i]}"; exit 1; }
  grep -oP '\[rank 0\] step=\K[0-9]+(?=, )' "$tmp/$i.log" >"$tmp/$i.steps"
  grep -oP '\[rank 0\] step=[0-9]+, .*?loss=\K[0-9.]+' "$tmp/$i.log" >"$tmp/$i.loss"
  grep -oP '"final_loss": \K[0-9.e+-]+' "$tmp/$i.log" | tail -1 >"$tmp/$i.final"
done
header="| step |" rule="|---|" final="| final |"
for i in "${!names[@]}"; do
  header+=" ${names[$i]} |" rule+="---|" final+=" $(cat "$tmp/$i.final") |"
done
echo "$header"
echo "$rule"
paste "$tmp/0.steps" "$tmp"/[0-6].loss | awk '$1 % 5 == 0 { s = "|"; for (i = 1; i <= NF; ++i) s = s " " $i " |"; print s }'
echo "$final"
cmp -s "$tmp/0.loss" "$tmp/1.loss" && cmp -s "$tmp/0.final" "$tmp/1.final" ||
  { echo "FAIL: hpZ's losses differ from stage 3's"; exit 1; }
cmp -s "$tmp/2.loss" "$tmp/3.loss" && cmp -s "$tmp/2.final" "$tmp/3.final" ||
  { echo "FAIL: qwZ + hpZ's losses differ from qwZ's"; exit 1; }
for check in "2 0.01" "4 0.02" "5 0.05" "6 0.005"; do
  read -r i limit <<<"$check"
  paste "$tmp/0.loss" "$tmp/$i.loss" | tail -10 |
    awk -v name="${names[$i]}" -v limit="$limit" '{ a += $1; b += $2 } END {
      d = (b - a) / a; if (d < 0) d = -d
      printf "mean loss of the last 10 steps: stage 3 %.4f, %s %.4f (%.2f%% apart, limit %g%%)\n", a / NR, name, b / NR, 100 * d, 100 * limit
      exit !(NR == 10 && d < limit) }' ||
    { echo "FAIL: ${names[$i]}: the mean loss over the last 10 steps is too far from stage 3's"; exit 1; }
done
echo "gpt zeropp: passed"
