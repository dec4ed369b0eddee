#!/usr/bin/env bash
# The main job on an embedded default: builds diskformer, makes a small random-weight lfm2moe model (no
# download), shows what it holds and how little of it must stay in memory, then runs a prompt with the routed
# experts streamed from disk through a 64 MiB expert cache (the model is ingested into an expert store on first
# use) and prints tokens/s with the cache's telemetry.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The same build/ and options as scripts/test.sh's Release build, less the tests: either script may run first and
# the second reuses the first one's objects.
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DDF_BUILD_TESTS=OFF
model=out/demo-lfm2moe-small.gguf
mkdir -p out
[ -f "$model" ] || build/diskformer make-model --arch lfm2moe --preset small --seed 1 -o "$model"
build/diskformer inspect "$model"
build/diskformer run -m "$model" --store out/demo-store --expert-cache 64M \
  -p "The quick brown fox" -n 64 --temp 0.8 --seed 1 --stats
