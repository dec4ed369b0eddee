#!/usr/bin/env bash
# Builds diskformer and runs every test: the Release build with -Werror, the same tests under ASan/UBSan, and
# the GGUF reader fuzzer for a bounded time. Set DF_FUZZ_SECONDS=0 or DF_SANITIZE=0 to skip those stages.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
fuzz_seconds=${DF_FUZZ_SECONDS:-60}
sanitize=${DF_SANITIZE:-1}
shared_dir=$(cd .. && pwd)/shared
[ -d "$shared_dir/golden" ] || { echo "error: golden fixtures not found at $shared_dir/golden"; exit 1; }

summary() { grep -Eo '[0-9]+ tests failed out of [0-9]+' "$1" | tail -1; }
declare -i passed=0 failed=0
run_ctest() {  # run_ctest BUILD_DIR LOG [ctest args...]
  local dir=$1 log=$2
  shift 2
  set +e
  ctest --test-dir "$dir" --output-on-failure -j2 "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  local line n_failed n_total
  line=$(summary "$log")
  n_failed=$(echo "$line" | awk '{print $1}')
  n_total=$(echo "$line" | awk '{print $6}')
  passed+=$(( ${n_total:-0} - ${n_failed:-0} ))
  failed+=${n_failed:-0}
  [ "$rc" -eq 0 ] || failed+=$(( n_failed > 0 ? 0 : 1 ))
}

echo "== Release build (-Wall -Wextra -Werror)"
# The demo configures the same build/ without tests (-DDF_BUILD_TESTS=OFF stays in CMake's cache): turn them
# on explicitly, so this works after the demo and the two share every object of the engine.
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DDF_BUILD_TESTS=ON -DDF_SHARED_DIR="$shared_dir"
run_ctest build build/ctest.log

if [ "$sanitize" = 1 ]; then
  echo "== ASan + UBSan build"
  scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDF_SANITIZE=ON -DDF_SHARED_DIR="$shared_dir"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest build-asan build-asan/ctest.log
fi

if [ "$fuzz_seconds" != 0 ]; then
  echo "== libFuzzer: GGUF reader, ${fuzz_seconds}s"
  cmake -S . -B build-fuzz -G Ninja -DDF_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDF_FUZZ=ON \
    -DDF_BUILD_TESTS=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build build-fuzz --target fuzz_gguf fuzz_make_seeds -j"$(nproc)"
  corpus=build-fuzz/corpus
  rm -rf "$corpus" && mkdir -p "$corpus"
  build-fuzz/fuzz/fuzz_make_seeds "$corpus" "$shared_dir"/golden/*.gguf
  if build-fuzz/fuzz/fuzz_gguf "$corpus" -max_total_time="$fuzz_seconds" -max_len=65536 -rss_limit_mb=2048 \
      -print_final_stats=1 > build-fuzz/fuzz.log 2>&1; then
    passed+=1
    tail -n 12 build-fuzz/fuzz.log
  else
    failed+=1
    tail -n 60 build-fuzz/fuzz.log
  fi
fi

echo "tests: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
