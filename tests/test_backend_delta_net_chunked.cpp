// The chunked form of the gated delta rule (tests/delta_net_reference.h, llama.cpp's
// build_delta_net_chunking) against the CPU backend's sequential op: the re-association a backend may use
// for prefill (Backend::gated_delta_net) agrees with the token-by-token rule within float rounding, over
// many chunks, at every split into calls, and with decays from near 1 to near 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "delta_net_reference.h"

namespace df::backend {
namespace {

using test::DeltaNetInputs;
using test::DeltaNetShape;

template <class T>
Buf<T> view(std::vector<T>& v) {
  return CpuBackend::host(v.data(), v.size());
}
template <class T>
Buf<const T> view(const std::vector<T>& v) {
  return CpuBackend::host(v.data(), v.size());
}

// The outputs of `rows` tokens in calls of `splits` rows each, then the final state.
std::vector<float> sequential(const DeltaNetShape& shape, const DeltaNetInputs& in, int64_t rows,
                              const std::vector<int64_t>& splits) {
  CpuBackend be(2);
  DeltaNetParams p;
  p.n_k_heads = shape.n_k;
  p.n_v_heads = shape.n_v;
  p.head_dim = shape.head_dim;
  p.eps = shape.eps;
  p.dt_bias = view(in.dt_bias);
  p.ssm_a = view(in.ssm_a);
  const int64_t nv = shape.n_v, d = shape.head_dim, C = (2 * shape.n_k + nv) * d;
  std::vector<float> state = in.state, out(static_cast<size_t>(rows * nv * d));
  int64_t r0 = 0;
  for (int64_t n : splits) {
    const auto part = [&](auto buf, int64_t width) {
      return buf.sub(static_cast<size_t>(r0 * width), static_cast<size_t>(n * width));
    };
    be.gated_delta_net(p, part(view(in.qkv), C), part(view(in.alpha), nv), part(view(in.beta), nv), n,
                       view(state), part(view(out), nv * d));
    r0 += n;
  }
  out.insert(out.end(), state.begin(), state.end());
  return out;
}

std::vector<float> chunked(const DeltaNetShape& shape, const DeltaNetInputs& in, int64_t rows,
                           const std::vector<int64_t>& splits, int chunk = 64) {
  const int64_t nv = shape.n_v, d = shape.head_dim, C = (2 * shape.n_k + nv) * d;
  std::vector<float> state = in.state, out(static_cast<size_t>(rows * nv * d));
  int64_t r0 = 0;
  for (int64_t n : splits) {
    test::gated_delta_net_chunked(shape, in.dt_bias.data(), in.ssm_a.data(), in.qkv.data() + r0 * C,
                                  in.alpha.data() + r0 * nv, in.beta.data() + r0 * nv, n, state.data(),
                                  out.data() + r0 * nv * d, chunk);
    r0 += n;
  }
  out.insert(out.end(), state.begin(), state.end());
  return out;
}

// Whether a and b (outputs of `n_out` values, then the state) agree within rel times the largest magnitude of
// each part: a chunk's sums come in another order, so an element's error is a fraction of the values' scale.
::testing::AssertionResult agree(const std::vector<float>& a, const std::vector<float>& b, size_t n_out,
                                 double rel) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " values vs " << b.size();
  for (const auto& [lo, hi] : {std::pair{size_t{0}, n_out}, std::pair{n_out, b.size()}}) {
    double scale = 0.0;
    for (size_t i = lo; i < hi; ++i) scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    for (size_t i = lo; i < hi; ++i)
      if (!(std::abs(static_cast<double>(a[i]) - b[i]) <= rel * scale))
        return ::testing::AssertionFailure() << (i < n_out ? "output " : "state ") << i << ": " << a[i]
                                             << " vs " << b[i] << " (scale " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(DeltaNetChunked, EqualsTheSequentialRuleOverManyChunks) {
  const int64_t rows = 200;  // three whole chunks and a partial one
  for (const DeltaNetShape& shape : {DeltaNetShape{2, 4, 16}, DeltaNetShape{2, 4, 32},
                                     DeltaNetShape{1, 2, 64}, DeltaNetShape{2, 2, 128}}) {
    const auto in = test::delta_net_inputs(shape, rows, 7 + static_cast<uint32_t>(shape.head_dim));
    const size_t n_out = static_cast<size_t>(rows * shape.n_v * shape.head_dim);
    const auto want = sequential(shape, in, rows, {rows});
    EXPECT_TRUE(agree(chunked(shape, in, rows, {rows}), want, n_out, 1e-4)) << "head size " << shape.head_dim;
  }
}

// Calls that end inside a chunk, at its end and one past it, and other chunk sizes: the state carries the
// sequence on exactly as the sequential rule's does.
TEST(DeltaNetChunked, AnySplitIntoCallsAndAnyChunkSizeAgree) {
  const DeltaNetShape shape{2, 4, 32};
  const int64_t rows = 200;
  const auto in = test::delta_net_inputs(shape, rows, 21);
  const size_t n_out = static_cast<size_t>(rows * shape.n_v * shape.head_dim);
  const auto want = sequential(shape, in, rows, {rows});
  EXPECT_EQ(sequential(shape, in, rows, {1, 63, 64, 65, 7}), want) << "the sequential op itself";
  for (int chunk : {1, 16, 64, 100})
    EXPECT_TRUE(agree(chunked(shape, in, rows, {1, 63, 64, 65, 7}, chunk), want, n_out, 1e-4))
        << "chunk " << chunk;
}

// Decays near 0 (e^G underflows within a chunk: only the last tokens count) and near 1 (the state hardly
// forgets): still the sequential results, and finite.
TEST(DeltaNetChunked, ExtremeDecaysAgree) {
  const DeltaNetShape shape{2, 4, 64};
  const int64_t rows = 130;
  for (float shift : {-12.0f, 12.0f}) {
    const auto in = test::delta_net_inputs(shape, rows, 31, shift);
    const size_t n_out = static_cast<size_t>(rows * shape.n_v * shape.head_dim);
    const auto got = chunked(shape, in, rows, {rows});
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "alpha shift " << shift;
    EXPECT_TRUE(agree(got, sequential(shape, in, rows, {rows}), n_out, 1e-4)) << "alpha shift " << shift;
  }
}

}  // namespace
}  // namespace df::backend
