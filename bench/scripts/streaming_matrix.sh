#!/usr/bin/env bash
# The streaming table of docs/PERF.md: diskformer bench on one model for every expert-cache budget, read-ahead
# depth and I/O mode, each run cold (page cache dropped; needs root). One JSON line per run is appended to OUT.
# Usage: bench/scripts/streaming_matrix.sh MODEL.gguf OUT.jsonl [budgets] [lookaheads] [io modes]
set -euo pipefail
model=$1
out=$2
budgets=${3:-"1G 2G 4G"}
lookaheads=${4:-"0 1 2"}
ios=${5:-"direct buffered"}
n_prompt=${N_PROMPT:-16}
n_decode=${N_DECODE:-16}
bin=${DISKFORMER:-build/diskformer}
for budget in $budgets; do
  for la in $lookaheads; do
    for io in $ios; do
      echo "== budget $budget lookahead $la io $io" >&2
      line=$("$bin" bench -m "$model" --expert-cache "$budget" --lookahead "$la" --io "$io" --cold \
        -p "$n_prompt" -n "$n_decode" --json 2>/dev/null | tail -n 1)
      echo "$line" | jq -c --arg b "$budget" '{budget: $b, lookahead, io, prefill_tps, decode_tps, hit_rate,
        bytes_per_token, read_bandwidth, io_wait_share, prefetch_precision, prefetch_recall, peak_rss_bytes,
        expert_cache_bytes, trunk_bytes, kv_bytes}' | tee -a "$out"
    done
  done
done
