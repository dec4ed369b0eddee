# Sourced by the GPU bench scripts (run_gpu_tiers.sh, run_gpu_cpu_misses.sh, run_multi_gpu.sh): the lfm2-24b
# make-model file with its expert store, and one bench run kept as a JSON line.

# lfm2_24b BIN_DIR MODEL_DIR [gguf]: sets m (the GGUF) and store (its expert store), writing each when
# missing; with "gguf", only the GGUF.
lfm2_24b() {
  m="$2/lfm2-24b.gguf"
  [ -f "$m" ] || "$1/diskformer" make-model --preset lfm2-24b -o "$m" -q
  store="$2/lfm2-24b.store"
  [ "${3:-}" != gguf ] || return 0
  [ -d "$store" ] || { /usr/bin/time -f "ingest %e s" "$1/diskformer" ingest "$m" -o "$store" 2>&1 | tail -2; }
}

# bench_json EXE OUT_DIR JSONL ARGS...: `EXE bench ARGS --json`; its JSON, with "binary" and "args" added, is
# appended to JSONL and left in OUT_DIR/last.json for the caller's summary. A failed run prints its stderr and
# returns 1.
bench_json() {
  local exe=$1 out=$2 jsonl=$3
  shift 3
  "$exe" bench "$@" --json 2>"$out/last.err" | tail -1 > "$out/last.json" || { cat "$out/last.err" >&2; return 1; }
  python3 - "$exe" "$*" "$out/last.json" >> "$jsonl" <<'PY'
import json, sys
exe, args, path = sys.argv[1:]
d = json.load(open(path))
d["binary"], d["args"] = exe, args
print(json.dumps(d))
PY
}
