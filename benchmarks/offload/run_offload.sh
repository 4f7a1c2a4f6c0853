#!/usr/bin/env bash
# Peak RSS per rank, engine accounting and step time of optimizer offload (bin/offload_bench),
# one run per row: stages 0 and 3 without offload, stage 3 with cpu and with nvme offload of the
# optimizer (and of the parameters), fp32 and bf16, some built under zero::Init. Environment: BUILD_DIR (build), NVME_PATH (a folder on the disk to test; default a
# fresh one under /tmp), RANKS (4), PARAMS (150000000), WIDTH (4096), STEPS (4), PORT (29758).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build} ranks=${RANKS:-4} params=${PARAMS:-150000000} width=${WIDTH:-4096}
steps=${STEPS:-4} port=${PORT:-29758}
nvme=${NVME_PATH:-$(mktemp -d "${TMPDIR:-/tmp}/zero_offload_bench.XXXXXX")}
echo "nvme_path $nvme on $(findmnt -n -o SOURCE,FSTYPE --target "$nvme" | tr -s ' ')"
echo "| ranks | stage | precision | offload | params | RSS start MiB | peak RSS building MiB | RSS after init MiB | peak RSS training MiB | peak RSS job MiB | engine device MiB | engine host MiB | nvme MiB | step s | optimizer step s | nvme pipeline GB/s | raw io_uring GB/s | pipeline/raw |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
# Rows: "stage precision offload_optimizer [offload_bench flags]"; ROWS (';'-separated) overrides.
# The tight rows keep one block gathered (no prefetch) and 1M-element buckets: the least memory.
tight="--live_blocks 1 --bucket 1000000"
default_rows="0 fp32 none;3 fp32 none;3 fp32 none --init;3 fp32 cpu;3 fp32 nvme;3 fp32 nvme --init
3 bf16 none;3 bf16 cpu;3 bf16 nvme;3 bf16 nvme --init;3 fp32 none $tight;3 fp32 none --init $tight
3 fp32 cpu --params_offload cpu --init $tight;3 fp32 nvme --params_offload nvme --init $tight
3 bf16 none --init $tight;3 bf16 nvme --params_offload nvme --init $tight"
IFS=';' read -r -a rows <<<"$(echo "${ROWS:-$default_rows}" | tr '\n' ';')"
for row in "${rows[@]}"; do
  set -- $row
  OMP_NUM_THREADS=1 "$build/bin/zerorun" --nproc_per_node "$ranks" --master_port "$port" --no_local_rank \
    "$build/bin/offload_bench" --stage "$1" --precision "$2" --offload "$3" --params "$params" \
    --width "$width" --steps "$steps" --nvme_path "$nvme" --sub_group 1000000 "${@:4}" 2>&1 |
    sed -n 's/^\[rank 0\] \(|.*\)$/\1/p'
done
