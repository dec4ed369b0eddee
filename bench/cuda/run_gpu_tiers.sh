#!/usr/bin/env bash
# The expert tiers on a GPU machine (docs/PERF.md "GPU expert tiers"): the ceilings (HBM read, pinned
# host-to-device), then diskformer bench on the make-model preset lfm2-24b with its experts streamed from an
# expert store through a RAM tier into a VRAM tier of several sizes, beside the all-in-VRAM run. One JSON line
# per run in $OUT_DIR/tiers.jsonl.
#   bench/cuda/run_gpu_tiers.sh [BIN_DIR=.] [MODEL_DIR=/tmp] [OUT_DIR=.] [P=128] [N=64]
set -euo pipefail
BIN=${1:-.}
MODELS=${2:-/tmp}
OUT=${3:-.}
P=${4:-128}
N=${5:-64}
"$BIN/df_cuda_bandwidth" 4 20 | tee "$OUT/bandwidth.json"
m="$MODELS/lfm2-24b.gguf"
[ -f "$m" ] || "$BIN/diskformer" make-model --preset lfm2-24b -o "$m" -q
store="$MODELS/lfm2-24b.store"
[ -d "$store" ] || { /usr/bin/time -f "ingest %e s" "$BIN/diskformer" ingest "$m" -o "$store" 2>&1 | tail -2; }
run() {
  echo "== $*" >&2
  "$BIN/diskformer" bench -m "$@" --device cuda -p "$P" -n "$N" --json 2>"$OUT/last.err" | tail -1 |
    tee -a "$OUT/tiers.jsonl" || { cat "$OUT/last.err" >&2; return 1; }
}
run "$m" --resident
for gpu in 1G 2G 4G 8G; do run "$store" --gpu-cache "$gpu" --ram-cache 14G --lookahead 1; done
for la in 0 2; do run "$store" --gpu-cache 4G --ram-cache 14G --lookahead "$la"; done
run "$store" --gpu-cache 2G --ram-cache 4G --lookahead 1
