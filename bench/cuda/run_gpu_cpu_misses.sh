#!/usr/bin/env bash
# --cpu-misses on a GPU machine (issue 11, docs/PERF.md): decode with a VRAM tier smaller than the experts,
# a RAM tier holding them all, and a layer's misses either copied up (the default) or computed on the host CPU
# from their RAM records while the GPU does the hits, copying --miss-copies a layer. The ceilings first (HBM,
# pinned host-to-device), then each ROUND runs llama.cpp's `llama-bench -ngl 99 -ot exps=CPU` on the same file
# (when LLAMA_BENCH names one), diskformer without --cpu-misses, and diskformer with it for each of COPIES.
# One JSON line per diskformer run in $OUT/cpu_misses.jsonl, one summary line per run on stdout.
#   [LLAMA_BENCH=path] [ROUNDS=2] [GPU=4G] [RAM=14G] [LA=1] [COPIES="0 1 2"] [THREADS=]
#   bench/cuda/run_gpu_cpu_misses.sh BIN_DIR [MODEL_DIR=/tmp] [OUT_DIR=.] [P=512] [N=64]
set -euo pipefail
BIN=${1:?BIN_DIR}
MODELS=${2:-/tmp}
OUT=${3:-.}
P=${4:-512}
N=${5:-64}
"$BIN/df_cuda_bandwidth" 4 20 | tee "$OUT/bandwidth.json"
source "$(dirname "$0")/common.sh"
lfm2_24b "$BIN" "$MODELS"
threads=()
[ -n "${THREADS:-}" ] && threads=(-t "$THREADS")
run() {
  bench_json "$BIN/diskformer" "$OUT" "$OUT/cpu_misses.jsonl" -m "$store" --device cuda -p "$P" -n "$N" -r 2 \
    --gpu-cache "${GPU:-4G}" --ram-cache "${RAM:-14G}" --lookahead "${LA:-1}" "${threads[@]}" "$@" || return 1
  python3 - "$*" "$OUT/last.json" <<'PY'
import json, sys
args, path = sys.argv[1:]
d = json.load(open(path))
dt = d.get("decode_device_telemetry", {})
host = dt.get("total", {}).get("host_computed", 0)
tokens = max(dt.get("tokens", 0), 1)
print("diskformer %s: decode %s tok/s, prefill %s tok/s, copies up %.1f MB/token, device hit %.3f (held %.3f), "
      "experts on the host %.1f/token, peak VRAM %.2f GB, peak RSS %.2f GB" % (
          args or "(copies only)", " / ".join("%.1f" % x for x in d["decode_tps_each"]),
          " / ".join("%.1f" % x for x in d["prefill_tps_each"]), d.get("gpu_copy_bytes_per_token", 0) / 1e6,
          dt.get("hit_rate", 0), dt.get("cache_hit_rate", 0), host / tokens,
          d["peak_device_bytes"] / 1e9, d["peak_rss_bytes"] / 1e9), file=sys.stderr)
PY
}
for round in $(seq "${ROUNDS:-2}"); do
  if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$m" -ngl 99 -ot exps=CPU -t "${THREADS:-$(nproc)}" -p "$P" -n "$N" -r 2 -o jsonl |
      tee -a "$OUT/llama.jsonl" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print("llama.cpp -ngl 99 -ot exps=CPU: n_prompt %d n_gen %d: %.1f tok/s" % (d["n_prompt"], d["n_gen"], d["avg_ts"]),
          file=sys.stderr)'
  fi
  run
  for c in ${COPIES:-0 1 2}; do run --cpu-misses --miss-copies "$c"; done
done
