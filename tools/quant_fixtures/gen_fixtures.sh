#!/usr/bin/env bash
# Regenerates tests/data/quant/ggml_reference.bin from the prebuilt llama.cpp (ggml) that node-llama-cpp
# 3.21.1 ships, the build the golden fixtures came from. Not part of the CMake build and not run in CI: run it
# by hand after changing gen_fixtures.c, and commit the result.
# Needs: npm (the registry), a C compiler, ../shared/golden/ beside the repository (or GOLDEN_DIR).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
golden="${GOLDEN_DIR:-$repo/../shared/golden}"
work="${NLC_DIR:-/tmp/nlc}"

mkdir -p "$work"
if [ ! -d "$work/node_modules/@node-llama-cpp/linux-x64" ]; then
  # --ignore-scripts: only the prebuilt binaries are wanted, not node-llama-cpp's post-install build step.
  (cd "$work" && npm i -E node-llama-cpp@3.21.1 --ignore-scripts --no-audit --no-fund)
fi
bins="$work/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
[ -f "$bins/libggml-base.so" ] || { echo "libggml-base.so not found under $bins" >&2; exit 1; }

cc -std=c11 -O1 -Wall -Wextra -o "$work/gen_fixtures" "$here/gen_fixtures.c" -ldl -lm
mkdir -p "$repo/tests/data/quant"
LD_LIBRARY_PATH="$bins" "$work/gen_fixtures" "$bins/libggml-base.so" "$bins/libggml-cpu-x64.so" "$golden" \
  "$repo/tests/data/quant/ggml_reference.bin"
