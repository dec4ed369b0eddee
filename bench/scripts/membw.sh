#!/usr/bin/env bash
# Memory read bandwidth of this machine (GB/s = 1e9 bytes/s): sum over a SIZE_MIB array with each thread count, best
# of REPEATS passes. Compiles membw.c into bench/scripts/build/ on first use (gitignored).
#   usage: membw.sh [--size-mib 1024] [--repeats 5] [--threads "1 2"] [--huge]
# --huge: the array on transparent huge pages (how diskformer holds weights and its expert cache).
set -euo pipefail

size_mib=1024
repeats=5
threads="1 2"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --size-mib) size_mib="$2"; shift 2 ;;
        --repeats) repeats="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --huge) export HUGE=1; shift ;;
        -h | --help) sed -n '2,5p' "$0"; exit 0 ;;
        *) echo "membw.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

here="$(cd "$(dirname "$0")" && pwd)"
binary="$here/build/membw"
if [[ ! -x "$binary" || "$here/membw.c" -nt "$binary" ]]; then
    mkdir -p "$here/build"
    # -march=native: the ceiling of this CPU's widest loads, which is what the engine's kernels use too.
    gcc -O2 -march=native -fopenmp -Wall -Wextra -Werror -o "$binary" "$here/membw.c"
fi

# Word splitting of $threads into separate arguments is intended.
# shellcheck disable=SC2086
OMP_PROC_BIND=close OMP_PLACES=cores "$binary" "$size_mib" "$repeats" $threads
