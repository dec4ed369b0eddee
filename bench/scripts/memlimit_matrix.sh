#!/usr/bin/env bash
# The promise "never OOM-killed", measured: `diskformer run` and `diskformer bench` with the automatic expert-cache
# budget under cgroup memory limits (memlimit.sh: page cache dropped first, page cache counted). One JSON line per
# run on stdout: the limit, the budget the engine chose and the reserve it kept (its printed line), the peak RSS
# (GNU time), the cgroup's peak, limit hits and OOM kills, and the exit status. Not a CI test: it needs root, a
# cgroup memory controller and a large store.
#
# usage: memlimit_matrix.sh STORE_OR_GGUF [--limits "1G 2G 4G"] [--diskformer build/diskformer] [-n 16]
#                           [--commands "run bench"]
set -euo pipefail
cd "$(dirname "$0")/../.."

model="${1:?usage: memlimit_matrix.sh STORE_OR_GGUF [--limits \"1G 2G 4G\"] [--diskformer PATH] [-n N]}"
shift
limits="1G 2G 4G"
diskformer=build/diskformer
n=16
commands="run bench"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --limits) limits="$2"; shift 2 ;;
        --diskformer) diskformer="$2"; shift 2 ;;
        -n) n="$2"; shift 2 ;;
        --commands) commands="$2"; shift 2 ;;
        *) echo "memlimit_matrix.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ -x /usr/bin/time ]] || { echo "memlimit_matrix.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
command -v jq > /dev/null || { echo "memlimit_matrix.sh: needs jq" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for limit in $limits; do
    for cmd in $commands; do
        case "$cmd" in
            run) args=(run -m "$model" -p "The quick brown fox" -n "$n" --temp 0 --seed 1 --no-display-prompt) ;;
            bench) args=(bench -m "$model" -p 16 -n "$n") ;;
            *) echo "memlimit_matrix.sh: unknown command '$cmd' (run, bench)" >&2; exit 2 ;;
        esac
        status=0
        bench/scripts/memlimit.sh --limit "$limit" -- /usr/bin/time -f 'maxrss_kib=%M' "$diskformer" "${args[@]}" \
            > "$work/out" 2> "$work/err" || status=$?
        summary="$(tail -n 1 "$work/out")"
        budget="$(grep -m1 -E '^expert cache ' "$work/err" || true)"
        error="$(grep -m1 -E '^error: ' "$work/err" || true)"
        rss_kib="$(sed -n 's/^maxrss_kib=//p' "$work/err" | tail -n 1)"
        jq -cn --arg limit "$limit" --arg cmd "$cmd" --arg budget "$budget" --arg error "$error" \
            --argjson rss_kib "${rss_kib:-null}" --argjson status "$status" --argjson m "$summary" '{
                tool: "memlimit_matrix", limit: $limit, command: $cmd, status: $status,
                budget_line: $budget, error: $error,
                peak_rss_mib: (if $rss_kib == null then null else ($rss_kib / 1024 * 10 | round / 10) end),
                cgroup_peak_mib: $m.peak_mib, limit_bytes: $m.limit_bytes, limit_hits: $m.limit_hits,
                oom_kills: $m.oom_kills, cache_dropped: $m.cache_dropped, elapsed_s: $m.elapsed_s}'
    done
done
