#!/usr/bin/env bash
# Fills the ignored folder .device/ of the checkout with what one call to the lent GPU machine needs (64 MiB
# at most travel), from a CUDA build in build/:
#   bench/cuda/device_bundle.sh tests [GOLDEN_MODELS...]  the gpu-labelled test binaries (stripped), their CTest
#       files, libfmt, and the golden models named (default: the four small ones and hy_v3-tiny, the project's
#       own (build/golden); lfm2moe-medium goes in a
#       call of its own with DF_TESTS=test_models_cuda_golden, the one test binary that reads it). There,
#       after unpacking (see the end): ln -sfn $PWD/.device/golden /work/shared/golden;
#       ln -sfn $PWD/.device/build /work/main/build; LD_LIBRARY_PATH=$PWD/.device/lib ctest --test-dir
#       /work/main/build -L gpu
#   bench/cuda/device_bundle.sh bench   diskformer and df_cuda_bandwidth (stripped) with their shared libraries
#       in .device/bench/lib, and run_gpu_bench.sh. There: LD_LIBRARY_PATH=$PWD/.device/bench/lib ...
# The test binaries hold the build's absolute paths (/work/main/build/tests, /work/shared/golden): the links
# above put the carried files there.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
mode=${1:-}
case "$mode" in
  tests)
    shift
    models=("$@")
    [ ${#models[@]} -gt 0 ] || models=(lfm2moe-tiny lfm2moe-tiny-f16 qwen3moe-tiny gpt-oss-tiny hy_v3-tiny)
    rm -rf .device/build .device/golden .device/lib
    mkdir -p .device/build/tests .device/golden .device/lib
    # Every shared library the chosen test binaries link but the C and C++ runtimes (the engine tests link
    # liburing, libxxhash, ICU, ...; the model tests only libfmt: leaving ICU out makes room for a model).
    for t in ${DF_TESTS:-test_backend_cuda_ops test_models_cuda_golden test_models_cuda_graphs test_models_cuda_split test_engine_cuda_tiers}; do
      ldd "$build/tests/$t" | awk '$3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libresolv|ld-linux[^/]*)\.so' |
        while read -r lib; do cp "$lib" .device/lib/; done
    done
    for t in ${DF_TESTS:-test_backend_cuda_ops test_models_cuda_golden test_models_cuda_graphs test_models_cuda_split test_engine_cuda_tiers}; do
      strip -o ".device/build/tests/$t" "$build/tests/$t"
      cp "$build/tests/${t}[1]_tests.cmake" ".device/build/tests/${t}_tests.cmake"
      echo "include(\"$(cd "$build" && pwd)/tests/${t}_tests.cmake\")" >> .device/build/tests/CTestTestfile.cmake
    done
    echo 'subdirs("tests")' > .device/build/CTestTestfile.cmake
    golden=${DF_GOLDEN:-../shared/golden}
    # The project's own fixtures (tests/golden, their models written by make-model) live in the build tree.
    mkdir -p .device/build/golden
    for m in "${models[@]}"; do
      if [ -e "$golden/$m.gguf" ]; then cp "$golden/$m".* .device/golden/; else cp "$build/golden/$m".* .device/build/golden/; fi
    done
    cp "$golden/README.md" .device/golden/
    ;;
  bench)
    rm -rf .device/bench
    mkdir -p .device/bench/lib
    strip -o .device/bench/diskformer "$build/diskformer"
    cp "$build/df_cuda_bandwidth" "$build/df_cuda_launch_chain" .device/bench/
    # Every shared library but the C and C++ runtimes (the GPU machine has no dev packages, and libcurl's
    # dependencies may be missing there).
    ldd "$build/diskformer" | awk '$3 ~ /^\// {print $3}' |
      grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libresolv|ld-linux[^/]*)\.so' |
      while read -r lib; do cp "$lib" .device/bench/lib/; done
    cp bench/cuda/ab_decode.sh bench/cuda/run_gpu_bench.sh bench/cuda/run_gpu_tiers.sh bench/cuda/run_gpu_cgroup.sh bench/cuda/run_gpu_cpu_misses.sh bench/cuda/run_multi_gpu.sh bench/cuda/common.sh bench/cuda/ncu_step.py bench/cuda/serve_check.py \
      .device/bench/
    ;;
  *)
    echo "usage: $0 tests [GOLDEN_MODELS...] | bench" >&2
    exit 2
    ;;
esac
# The binaries, compressed (at most 64 MiB travel): carry .device/build.tar.xz (tests, with .device/golden) or
# .device/bench.tar.xz, and unpack there with tar -xJf .device/NAME.tar.xz -C .device.
case "$mode" in
  tests) tar -cJf .device/build.tar.xz -C .device build lib ;;
  bench) tar -cJf .device/bench.tar.xz -C .device bench ;;
esac
du -sh .device/* | sed 's/^/carry: /'
