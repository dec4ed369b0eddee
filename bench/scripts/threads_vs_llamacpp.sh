#!/usr/bin/env bash
# CPU decode and prefill at several thread counts, diskformer and llama.cpp alternated in one run, with the
# memory bandwidth measured at the same thread counts (issue 18's acceptance measurement):
#   threads_vs_llamacpp.sh --diskformer BIN --model GGUF [--llama-bench BIN] [--threads "2 8 16"]
#                          [--rounds 2] [--prompt 64] [--decode 64] [--out DIR] [--bytes-per-token B]
# Every weight is in RAM for both (diskformer --resident, llama-bench -ngl 0 with no GPU visible). Each round
# runs every thread count, diskformer then llama.cpp, so drift between the two (clock, other tenants) shows
# up as a spread between rounds rather than as a bias. Writes DIR/runs.jsonl (one line per run) and prints
# a table: tok/s, the GB/s decode implies and its share of membw's figure. The bytes a decode step reads are
# the trunk plus k of the n experts of every MoE layer, from diskformer's JSON (--bytes-per-token overrides:
# the trunk figure includes the token embedding table, of which a step reads one row).
set -euo pipefail

diskformer="" model="" llama_bench="" threads="2 8 16" rounds=2 prompt=64 decode=64 out="bench-threads" bpt=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --diskformer) diskformer="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --llama-bench) llama_bench="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --prompt) prompt="$2"; shift 2 ;;
        --decode) decode="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --bytes-per-token) bpt="$2"; shift 2 ;;
        -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "threads_vs_llamacpp.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ -x "$diskformer" ]] || { echo "threads_vs_llamacpp.sh: --diskformer BIN is required (an executable)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "threads_vs_llamacpp.sh: --model GGUF is required (a file)" >&2; exit 2; }
[[ -z "$llama_bench" || -x "$llama_bench" ]] || { echo "threads_vs_llamacpp.sh: $llama_bench is not executable" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
runs="$out/runs.jsonl"
: > "$runs"

for round in $(seq 1 "$rounds"); do
    for t in $threads; do
        line=$("$diskformer" bench -m "$model" --resident -p "$prompt" -n "$decode" -r 2 -t "$t" --json 2>/dev/null | tail -1)
        echo "{\"engine\":\"diskformer\",\"round\":$round,\"run\":$line}" >> "$runs"
        if [[ -n "$llama_bench" ]]; then
            # llama-bench's JSON is an array of one object per test (pp, tg).
            line=$(CUDA_VISIBLE_DEVICES="" "$llama_bench" -m "$model" -ngl 0 -p "$prompt" -n "$decode" -r 2 -t "$t" -o json 2>/dev/null | tr -d '\n')
            echo "{\"engine\":\"llama.cpp\",\"round\":$round,\"threads\":$t,\"run\":$line}" >> "$runs"
        fi
    done
done

"$here/membw.sh" --huge --threads "$threads" > "$out/membw.txt"
cat "$out/membw.txt"

python3 - "$runs" "$out/membw.txt" "$bpt" <<'EOF'
import json, re, sys
from collections import defaultdict
runs = [json.loads(l) for l in open(sys.argv[1])]
membw = {}
for l in open(sys.argv[2]):
    if l.startswith("{"):
        m = json.loads(l)
        membw[m["threads"]] = m["read_gbps"]
df = defaultdict(list); ll = defaultdict(list); bytes_per_token = float(sys.argv[3]) or None
for r in runs:
    if r["engine"] == "diskformer":
        x = r["run"]; t = x["threads"]
        df[t].append((x["prefill_tps"], x["decode_tps"]))
        if not bytes_per_token and x.get("n_expert"):
            bytes_per_token = x["trunk_bytes"] + x["expert_cache_bytes"] * x["n_expert_used"] / x["n_expert"]
    else:
        t = r["threads"]; pp = tg = None
        for test in r["run"]:
            if test["n_gen"] == 0: pp = test["avg_ts"]
            else: tg = test["avg_ts"]
        ll[t].append((pp, tg))
print(f"bytes per decoded token: {bytes_per_token / 1e9:.3f} GB" if bytes_per_token else "bytes per token unknown")
print("| threads | diskformer prefill / decode tok/s | llama.cpp prefill / decode tok/s | ratio prefill / decode | decode GB/s (% of membw) |")
print("|---|---|---|---|---|")
for t in sorted(df):
    d = " ; ".join(f"{p:.1f} / {g:.2f}" for p, g in df[t])
    l = " ; ".join(f"{p:.1f} / {g:.2f}" for p, g in ll[t]) if ll[t] else "-"
    ratio = "-"
    if ll[t]:
        dp = sum(p for p, _ in df[t]) / len(df[t]); dg = sum(g for _, g in df[t]) / len(df[t])
        lp = sum(p for p, _ in ll[t]) / len(ll[t]); lg = sum(g for _, g in ll[t]) / len(ll[t])
        ratio = f"{dp / lp:.2f} / {dg / lg:.2f}"
    bw = "-"
    if bytes_per_token:
        dg = sum(g for _, g in df[t]) / len(df[t]); gbs = dg * bytes_per_token / 1e9
        bw = f"{gbs:.1f}" + (f" ({100 * gbs / membw[t]:.0f} % of {membw[t]:.1f})" if t in membw else "")
    print(f"| {t} | {d} | {l} | {ratio} | {bw} |")
EOF
