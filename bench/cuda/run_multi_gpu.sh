#!/usr/bin/env bash
# The layer split over several GPUs (issue 19; docs/ARCHITECTURE.md "Several devices"): diskformer bench on
# the make-model preset lfm2-24b, one GPU against the split, alternated in each of ROUNDS rounds:
#   - all in VRAM: --device cuda:0 --resident against --device $DEVICES --resident (the layer split) and
#     against --device $DEVICES --resident --split-mode expert (every layer's experts spread over the cards);
#   - streamed: one GPU with --gpu-cache $ONE against the split with --gpu-cache $EACH on every card, the RAM
#     tier holding every record (the issue's bar: the split's device hit rate equals one GPU's with the sum
#     of the cards' tiers, and its decode is at least 0.9x of it).
# Each run -r 2 (repetition 2 is the warm figure). One JSON line per run in $OUT_DIR/multi_gpu.jsonl, a
# summary line per run on stderr with each card's layers and peak VRAM. On a machine with one GPU,
# DEVICES=cuda:0,cuda:0 runs the same code with that GPU standing in for two (figures then say nothing
# about two cards' speed, only that the split runs).
# STREAMED=0 leaves the streamed runs out (and the store is not ingested).
#   [DEVICES=cuda:0,cuda:1] [ONE=4G] [EACH=2G] [ROUNDS=2] [STREAMED=1] bench/cuda/run_multi_gpu.sh
#       [BIN_DIR=.] [MODEL_DIR=/tmp] [OUT_DIR=.] [P=128] [N=64]
set -euo pipefail
BIN=${1:-.}
MODELS=${2:-/tmp}
OUT=${3:-.}
P=${4:-128}
N=${5:-64}
DEVICES=${DEVICES:-cuda:0,cuda:1}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (it can take a shared host's GPUs out of service)
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv | tee "$OUT/gpus.csv" >&2
source "$(dirname "$0")/common.sh"
lfm2_24b "$BIN" "$MODELS" "$([ "${STREAMED:-1}" = 1 ] || echo gguf)"
run() {  # bench's arguments
  bench_json "$BIN/diskformer" "$OUT" "$OUT/multi_gpu.jsonl" -m "$@" -p "$P" -n "$N" -r 2 || return 1
  python3 - "$*" "$OUT/last.json" <<'PY'
import json, sys
args, path = sys.argv[1:]
d = json.load(open(path))
dt = d.get("decode_device_telemetry", {})
def part(c):
    if "first_expert" in c:
        return "experts %d-%d" % (c["first_expert"], c["end_expert"] - 1)
    return "layers %d-%d" % (c["first_layer"], c["end_layer"] - 1)
cards = ", ".join("%s %s tier %.2f GB peak %.2f GB" % (
    c["name"], part(c), c.get("gpu_cache_bytes", 0) / 1e9, c["peak_device_bytes"] / 1e9)
    for c in d.get("devices", []))
print("%s: decode %s tok/s, prefill %s tok/s, device hit %s, copies up %.1f MB/token; %s; peak RSS %.2f GB" % (
    args, " / ".join("%.1f" % x for x in d["decode_tps_each"]),
    " / ".join("%.1f" % x for x in d["prefill_tps_each"]), "%.3f" % dt["hit_rate"] if dt else "-",
    d.get("gpu_copy_bytes_per_token", 0) / 1e6, cards, d["peak_rss_bytes"] / 1e9), file=sys.stderr)
PY
}
for round in $(seq "${ROUNDS:-2}"); do
  run "$m" --device cuda:0 --resident
  run "$m" --device "$DEVICES" --resident
  run "$m" --device "$DEVICES" --resident --split-mode expert
  [ "${STREAMED:-1}" = 1 ] || continue
  run "$store" --device cuda:0 --gpu-cache "${ONE:-4G}" --ram-cache 14G --lookahead 1
  run "$store" --device "$DEVICES" --gpu-cache "${EACH:-2G}" --ram-cache 14G --lookahead 1
done
