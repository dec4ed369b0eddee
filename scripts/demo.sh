#!/usr/bin/env bash
# The main job on an embedded default: builds diskformer, makes a small random-weight lfm2moe model (no download),
# shows what it holds and how little of it must stay in memory, and runs a prompt through it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DDF_BUILD_TESTS=OFF
model=out/demo-lfm2moe-small.gguf
mkdir -p out
[ -f "$model" ] || build/diskformer make-model --arch lfm2moe --preset small --seed 1 -o "$model"
build/diskformer inspect "$model" --tensors=false
if build/diskformer run --help >/dev/null 2>&1; then
  build/diskformer run -m "$model" -p "The quick brown fox" -n 32 --temp 0 --stats
fi
