// Single-threaded throughput of the dot-product kernels, per weight type and SIMD level (every level this
// CPU supports, or only DF_SIMD's when it is set). Bytes processed are the weight bytes streamed per call,
// so GB/s compares directly with memory bandwidth:
//   matvec/<type>/<level>/<n_in>x<rows>          decode: one activation row against a weight matrix
//   matmul/<type>/<level>/<n_in>x<rows>x<tokens> prefill: a chunk of activation rows against the matrix
//   quantize/<format>/<level>/<n>                 activation quantizer (bytes: the f32 input)
// Matrices of a few MB to tens of MB: they sit in L2/L3 or DRAM depending on the machine; say which when
// quoting a figure.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/kernels/vec_dot.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "util/huge_page_buffer.h"

namespace {

using df::GgmlType;
using df::kernels::SimdLevel;
namespace q = df::quant;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A rows x n matrix of type t: a few distinct quantized rows repeated (the reference K-quant quantizers are
// too slow to quantize tens of millions of values for a benchmark; the kernels' speed does not depend on
// the values).
const std::vector<uint8_t>& matrix(GgmlType t, int64_t n, int64_t rows) {
  static std::map<std::tuple<GgmlType, int64_t, int64_t>, std::vector<uint8_t>> cache;
  auto& m = cache[{t, n, rows}];
  if (m.empty()) {
    constexpr int64_t kDistinct = 8;
    const size_t row_bytes = df::ggml_row_bytes(t, n);
    std::vector<uint8_t> distinct(row_bytes * kDistinct);
    for (int64_t r = 0; r < kDistinct; ++r) {
      const auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(r + 1));
      q::quantize_row(t, x.data(), distinct.data() + static_cast<size_t>(r) * row_bytes, n);
    }
    m.resize(row_bytes * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(m.data() + static_cast<size_t>(r) * row_bytes,
                  distinct.data() + static_cast<size_t>(r % kDistinct) * row_bytes, row_bytes);
  }
  return m;
}

std::vector<uint8_t> activations(GgmlType act, int64_t n, int64_t cols) {
  const size_t row_bytes = df::ggml_row_bytes(act, n);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(1000 + c));
    q::quantize_activation(act, x.data(), out.data() + static_cast<size_t>(c) * row_bytes, n);
  }
  return out;
}

// packed: the matrix repacked as Q4_0x16 and run through packed_gemm (Q4_0 only).
void run_gemm(benchmark::State& state, GgmlType t, SimdLevel level, int64_t n, int64_t rows, int64_t cols,
              bool packed) {
  const auto& k = df::kernels::vec_dot_kernels(t, level);
  std::vector<uint8_t> w = matrix(t, n, rows);
  if (packed) {
    std::vector<uint8_t> group(df::ggml_row_bytes(t, n) * q::kQ4_0x16Rows);
    q::pack_q4_0x16_in_place(w.data(), rows, n, group.data());
  }
  const df::kernels::GemmFn gemm = packed ? k.packed_gemm : k.gemm;
  // On huge pages, as the engine holds its weights (util/huge_page_buffer.h).
  df::HugePageBuffer wb(w.size(), "benchmark matrix");
  std::memcpy(wb.data(), w.data(), w.size());
  const auto a = activations(k.activation, n, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t w_stride = df::ggml_row_bytes(t, n), a_stride = df::ggml_row_bytes(k.activation, n);
  for (auto _ : state) {
    gemm(wb.data(), w_stride, rows, a.data(), a_stride, cols, n, out.data(), static_cast<size_t>(rows));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(n * rows * cols) * state.iterations() * 1e-9, benchmark::Counter::kIsRate);
}

void run_quantize(benchmark::State& state, GgmlType act, SimdLevel level, int64_t n) {
  const auto quantize = df::kernels::activation_quantizer(act, level);
  const auto x = random_floats(static_cast<size_t>(n), 7);
  std::vector<uint8_t> out(df::ggml_row_bytes(act, n));
  for (auto _ : state) {
    quantize(x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

std::vector<SimdLevel> levels() {
  const char* env = std::getenv("DF_SIMD");
  if (env != nullptr && *env != '\0') return {df::kernels::select_simd_level()};
  std::vector<SimdLevel> out;
  for (SimdLevel level : df::kernels::kAllSimdLevels) {
    if (df::kernels::simd_level_supported(level)) out.push_back(level);
  }
  return out;
}

void register_all() {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::MXFP4,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16};
  struct Shape {
    int64_t n, rows, cols;
  };
  // Expert matrices of a 30B-A3B-class MoE (2048 x 768..1536) and a dense FFN (2048 x 6144); an output
  // head (2048 x 65536); a prefill chunk of 64 tokens.
  // The 65536-row head of a 2048-wide model does not fit in any cache: its matvec runs at DRAM speed.
  const Shape shapes[] = {{2048, 1536, 1}, {2048, 6144, 1}, {2048, 65536, 1}, {2048, 1536, 64}};
  for (SimdLevel level : levels()) {
    const std::string lv(df::kernels::simd_level_name(level));
    for (GgmlType t : types) {
      for (bool packed : {false, true}) {
        if (packed && t != GgmlType::Q4_0) continue;
        const std::string tn = packed ? std::string("q4_0x16") : std::string(df::ggml_type_name(t));
        for (const Shape& s : shapes) {
          // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string chains.
          std::string name = s.cols == 1 ? "matvec/" : "matmul/";
          name.append(tn).append("/").append(lv).append("/").append(std::to_string(s.n));
          name.append("x").append(std::to_string(s.rows));
          if (s.cols > 1) name.append("x").append(std::to_string(s.cols));
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
            run_gemm(st, t, level, s.n, s.rows, s.cols, packed);
          })->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (GgmlType act : {GgmlType::Q8_0, GgmlType::Q8_K, GgmlType::F16}) {
      std::string name = "quantize/";
      name.append(df::ggml_type_name(act)).append("/").append(lv).append("/2048");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
        run_quantize(st, act, level, 2048);
      })->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
