#!/usr/bin/env bash
# The CUDA benchmark of docs/PERF.md, on a GPU machine: the HBM read ceiling, then diskformer bench with every
# weight in VRAM (--resident --device cuda) on the make-model presets `small` and `lfm2-24b` (written to
# $MODEL_DIR first), after prompts of 512 and 8 tokens, alternated twice, one JSON line per run in
# $OUT_DIR/bench.jsonl.
#   bench/cuda/run_gpu_bench.sh [BIN_DIR=.] [MODEL_DIR=/tmp] [OUT_DIR=.]
# BIN_DIR holds diskformer and df_cuda_bandwidth (built with nvcc: cmake finds it, DF_CUDA=ON); their shared
# libraries (libfmt, liburing, libxxhash, libicuuc, libicudata, libcrypto) go on LD_LIBRARY_PATH when the
# machine lacks them. DF_CUDA_PROFILE=1 adds a per-op time table (each op synchronised) to a last run.
# LLAMA_BENCH=path/to/llama-bench (llama.cpp's CUDA build, bench/cuda/README.md) alternates llama.cpp with
# diskformer in each round on the lfm2-24b file: pp512 and tg128, flash attention off and on, JSON lines in
# $OUT_DIR/llama.jsonl.
set -euo pipefail
BIN=${1:-.}
MODELS=${2:-/tmp}
OUT=${3:-.}
"$BIN/df_cuda_bandwidth" 4 20 | tee "$OUT/bandwidth.json"
for preset in small lfm2-24b; do
  [ -f "$MODELS/$preset.gguf" ] || "$BIN/diskformer" make-model --preset "$preset" -o "$MODELS/$preset.gguf" -q
done
# Decode after a 512-token prompt and after an 8-token one: llama-bench's tg128 decodes from an empty
# context, so the -p 8 line is the one to set beside llama.cpp's figure; the gap between the two is what
# attention over the context costs.
for _ in 1 2; do
  if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$MODELS/lfm2-24b.gguf" -ngl 99 -p 512 -n 128 -fa 0,1 -r 3 -o jsonl 2>/dev/null |
      tee -a "$OUT/llama.jsonl"
  fi
  for preset in small lfm2-24b; do
    for prompt in 512 8; do
      "$BIN/diskformer" bench -m "$MODELS/$preset.gguf" --resident --device cuda -p "$prompt" -n 128 --json \
        2>/dev/null | tail -1 | tee -a "$OUT/bench.jsonl"
    done
  done
done
if [ "${DF_CUDA_PROFILE:-0}" != 0 ]; then
  "$BIN/diskformer" bench -m "$MODELS/lfm2-24b.gguf" --resident --device cuda -p 8 -n 64 2>&1 |
    sed -n '/op profile/,$p' | tee "$OUT/profile.txt"
fi
