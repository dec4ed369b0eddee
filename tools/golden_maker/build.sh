#!/usr/bin/env bash
# Builds golden_maker against llama.cpp v0.4.0 as shipped prebuilt by node-llama-cpp 3.21.1 (the build the golden
# fixtures in shared/golden came from). Nothing of llama.cpp is compiled: the headers come from the source bundle that
# node-llama-cpp ships (gitRelease.bundle, commit 80fb11ac), the code from the prebuilt .so files, found at run time
# through an rpath relative to the binary. Not part of the project's CMake build.
#
# Needs: bash setup.sh in bench/llamacpp (node_modules installed), git, g++ with C++17.
# Output: tools/golden_maker/build/golden_maker
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
NLC="$REPO/bench/llamacpp/node_modules"
BINS="$NLC/@node-llama-cpp/linux-x64/bins/linux-x64"
BUNDLE="$NLC/node-llama-cpp/llama/gitRelease.bundle"
COMMIT=80fb11ac73e66d89eae2c6a91d8a77428fa733ed
BUILD="$HERE/build"
SRC="$BUILD/llama.cpp-$COMMIT"

for f in "$BINS/libllama.v0.4.0.so" "$BINS/libllama-common.so" "$BINS/libggml.v0.4.0.so" "$BINS/libggml-base.so" \
         "$BUNDLE"; do
    if [ ! -e "$f" ]; then
        echo "build.sh: missing $f (run bench/llamacpp/setup.sh first)" >&2
        exit 1
    fi
done
mkdir -p "$BUILD"

# The headers must be the ones the prebuilt libraries were compiled from: clone the bundle and check out the pinned
# commit (struct layouts such as llama_context_params and common_chat_templates_inputs must match the .so exactly).
if [ ! -f "$SRC/.complete" ]; then
    rm -rf "$SRC" "$SRC.tmp"
    git clone --quiet --no-checkout "$BUNDLE" "$SRC.tmp"
    git -C "$SRC.tmp" -c advice.detachedHead=false checkout --quiet "$COMMIT" -- include ggml/include common vendor/nlohmann
    mv "$SRC.tmp" "$SRC"
    touch "$SRC/.complete"
fi
test "$(git -C "$SRC" rev-parse "$COMMIT^{commit}")" = "$COMMIT"

# rpath relative to the binary, so the checkout can move.
RPATH="\$ORIGIN/$(realpath --relative-to="$BUILD" "$BINS")"
CXX="${CXX:-g++}"
"$CXX" -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter \
    -isystem "$SRC/include" -isystem "$SRC/ggml/include" -isystem "$SRC/common" -isystem "$SRC/vendor" \
    "$HERE"/*.cpp -o "$BUILD/golden_maker.tmp" \
    -L"$BINS" -l:libllama-common.so -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so \
    -Wl,-rpath,"$RPATH" -Wl,--disable-new-dtags
mv "$BUILD/golden_maker.tmp" "$BUILD/golden_maker"
echo "built $BUILD/golden_maker"
