#!/usr/bin/env bash
# Alternates builds, or one build under different environment knobs, on one GPU: the A/B runs every kernel
# change of docs/PERF.md is judged by, in one call so that every figure comes from the same machine.
#   bench/cuda/ab_decode.sh MODEL ROUNDS SPEC [SPEC...]
# SPEC is DIR or DIR,VAR=VALUE[,VAR=VALUE...]: DIR holds a diskformer binary, the variables are set for its runs
# only (e.g. `new,DF_CUDA_PDL=0`). Each round runs every SPEC once, in the order given, and prints one line:
# the SPEC and bench's decode and repetitions lines. Then each SPEC's greedy output (`run --temp 0`) is
# compared with the first SPEC's: SAME or DIFFERENT (a timing-only build that skips work is expected to
# differ).
# BENCH_ARGS (default: --device cuda:0 --resident -p 8 -n 128 -r 2) and RUN_ARGS (default: --device cuda:0
# --resident -n 48) replace the runs' arguments; OUT_DIR (default .) receives ab.txt.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: ab_decode.sh MODEL ROUNDS SPEC [SPEC...]   (SPEC: DIR or DIR,VAR=VALUE,...)" >&2
  exit 2
fi
model=$1
rounds=$2
shift 2
[ -f "$model" ] || [ -d "$model" ] || { echo "ab_decode.sh: no model at $model" >&2; exit 2; }
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "ab_decode.sh: ROUNDS must be a positive integer, got '$rounds'" >&2
  exit 2
fi
read -r -a bench_args <<< "${BENCH_ARGS:---device cuda:0 --resident -p 8 -n 128 -r 2}"
read -r -a run_args <<< "${RUN_ARGS:---device cuda:0 --resident -n 48}"
out=${OUT_DIR:-.}
mkdir -p "$out"
for spec in "$@"; do
  dir=${spec%%,*}
  [ -x "$dir/diskformer" ] || { echo "ab_decode.sh: no diskformer in '$dir' (SPEC '$spec')" >&2; exit 2; }
done

# with_spec SPEC ARGS...: the SPEC's diskformer with ARGS, its variables set.
with_spec() {
  local spec=$1
  shift
  local dir=${spec%%,*} vars=()
  [ "$spec" = "$dir" ] || IFS=, read -r -a vars <<< "${spec#*,}"
  env ${vars[@]+"${vars[@]}"} "$dir/diskformer" "$@"
}

for ((r = 1; r <= rounds; ++r)); do
  for spec in "$@"; do
    line=$(with_spec "$spec" bench -m "$model" "${bench_args[@]}" 2>&1 |
      grep -E '^(decode +[0-9]|repetitions )' | tr -s ' \n' ' ' || true)
    [ -n "$line" ] || line="bench printed no decode line: run it alone to see why"
    echo "round $r  $spec  $line" | tee -a "$out/ab.txt"
  done
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for spec in "$@"; do
  with_spec "$spec" run -m "$model" -p "The sky is" --temp 0 "${run_args[@]}" > "$tmp/$i.txt" 2>/dev/null ||
    true
  if [ "$i" -gt 0 ]; then
    verdict="DIFFERENT greedy output from"
    cmp -s "$tmp/0.txt" "$tmp/$i.txt" && verdict="SAME greedy output as"
    echo "output  $spec  $verdict $1" | tee -a "$out/ab.txt"
  fi
  i=$((i + 1))
done
