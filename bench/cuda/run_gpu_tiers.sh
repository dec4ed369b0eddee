#!/usr/bin/env bash
# The expert tiers on a GPU machine (docs/PERF.md "GPU expert tiers"): the ceilings (HBM read, pinned
# host-to-device), then diskformer bench on the make-model preset lfm2-24b with its experts streamed from an
# expert store through a RAM tier into a VRAM tier of several sizes, beside the all-in-VRAM run. Each bench
# runs -r 2: repetition 1 starts with a cold RAM tier (its prompt reads the records from disk, and records no
# prompt token touched are read during its decode), repetition 2 is the warm figure. With BASE=path/to/an
# older diskformer the two binaries alternate in each of ROUNDS rounds. One JSON line per run in
# $OUT_DIR/tiers.jsonl, one summary line per run on stdout. GPUS: the VRAM tier sizes run at lookahead 1;
# LAS: the other lookaheads run at 4G; RESIDENT=0 leaves out the all-in-VRAM run.
#   [BASE=...] [ROUNDS=1] [GPUS="1G 2G 4G 8G 12G"] [LAS="0 2"] [RESIDENT=1] bench/cuda/run_gpu_tiers.sh
#       [BIN_DIR=.] [MODEL_DIR=/tmp] [OUT_DIR=.] [P=128] [N=64]
set -euo pipefail
BIN=${1:-.}
MODELS=${2:-/tmp}
OUT=${3:-.}
P=${4:-128}
N=${5:-64}
"$BIN/df_cuda_bandwidth" 4 20 | tee "$OUT/bandwidth.json"
source "$(dirname "$0")/common.sh"
lfm2_24b "$BIN" "$MODELS"
run() {  # binary, then bench's arguments
  local exe=$1
  shift
  bench_json "$exe" "$OUT" "$OUT/tiers.jsonl" -m "$@" --device cuda -p "$P" -n "$N" -r 2 || return 1
  python3 - "$exe" "$*" "$OUT/last.json" <<'PY'
import json, sys
exe, args, path = sys.argv[1:]
d = json.load(open(path))
dt = d.get("decode_device_telemetry", {})
print("%s %s: decode %s tok/s, prefill %s tok/s, copies up %.1f MB/token, device hit %s (held %s), "
      "RAM hit %s, disk %.1f MB/token, device prefetch precision %s recall %s, peak VRAM %.2f GB, "
      "peak RSS %.2f GB" % (
          exe, args, " / ".join("%.1f" % x for x in d["decode_tps_each"]),
          " / ".join("%.1f" % x for x in d["prefill_tps_each"]), d.get("gpu_copy_bytes_per_token", 0) / 1e6,
          "%.3f" % dt["hit_rate"] if dt else "-", "%.3f" % dt["cache_hit_rate"] if dt else "-",
          "%.3f" % d["hit_rate"], d.get("bytes_per_token", 0) / 1e6,
          "%.3f" % dt["prefetch_precision"] if dt else "-", "%.3f" % dt["prefetch_recall"] if dt else "-",
          d["peak_device_bytes"] / 1e9, d["peak_rss_bytes"] / 1e9), file=sys.stderr)
PY
}
bins=("$BIN/diskformer")
[ -n "${BASE:-}" ] && bins=("$BASE" "$BIN/diskformer")
for round in $(seq "${ROUNDS:-1}"); do
  for exe in "${bins[@]}"; do
    [ "${RESIDENT:-1}" = 0 ] || run "$exe" "$m" --resident
    for gpu in ${GPUS:-1G 2G 4G 8G 12G}; do run "$exe" "$store" --gpu-cache "$gpu" --ram-cache 14G --lookahead 1; done
    for la in ${LAS:-0 2}; do run "$exe" "$store" --gpu-cache 4G --ram-cache 14G --lookahead "$la"; done
  done
done
[ "${SMALL_RAM:-1}" = 0 ] || run "$BIN/diskformer" "$store" --gpu-cache 2G --ram-cache 4G --lookahead 1
