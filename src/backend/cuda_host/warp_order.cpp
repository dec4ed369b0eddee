#include "backend/cuda_host/warp_order.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/cpu_features.h"
#include "quant/portable_exp.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend::cuda_host {
namespace {

constexpr int kLanes = 32;

// The warp's xor butterfly (device_common.cuh warp_sum) as lane 0 ends it: at each offset o a lane adds its
// partner's value to its own, so lane 0 holds ((l0 + l16) + (l8 + l24)) + ... in this tree.
float butterfly(float (&lane)[kLanes]) {
  for (int o = kLanes / 2; o > 0; o >>= 1)
    for (int j = 0; j < o; ++j) lane[j] = lane[j] + lane[j + o];
  return lane[0];
}

// The block contributions of one row, in the kernels' traits' order (matvec.cuh TQ4_0::dot, TQ8_0::dot).
float q4_0_block(const quant::BlockQ4_0& b, const int8_t* a, float dx) {
  int s = 0;
  for (int i = 0; i < 16; ++i) {
    s += (static_cast<int>(b.qs[i] & 0x0F) - 8) * a[i];
    s += (static_cast<int>(b.qs[i] >> 4) - 8) * a[i + 16];
  }
  return static_cast<float>(s) * quant::fp16_to_fp32(b.d) * dx;
}

float q8_0_block(const quant::BlockQ8_0& b, const int8_t* a, float dx) {
  int s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<int>(b.qs[i]) * a[i];
  return static_cast<float>(s) * (quant::fp16_to_fp32(b.d) * dx);
}

// One row from its blocks' contributions, lane by lane.
template <class BlockAt>
float warp_row(int64_t nb, BlockAt contribution) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    float acc = 0.0f;
    for (int64_t b = l; b < nb; b += kLanes) acc += contribution(b);
    lane[l] = acc;
  }
  return butterfly(lane);
}

// Block b of row r (0..15) of a Q4_0x16 group, as the Q4_0 block it was packed from (q4_0x16.h).
quant::BlockQ4_0 q4_0x16_block(const uint8_t* group, int64_t b, int r) {
  const auto& pb = reinterpret_cast<const quant::BlockQ4_0x16*>(group)[b];
  quant::BlockQ4_0 out;
  out.d = pb.d[r];
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) out.qs[4 * j + i] = pb.qs[j][r][i];
  return out;
}

void reference_rows(const Weight& w, int64_t row0, int64_t row1, const QuantizedRow& x, float* out) {
  const int64_t nb = w.n_in / 32;
  for (int64_t r = row0; r < row1; ++r) {
    float& o = out[r - row0];
    if (w.type == GgmlType::Q8_0) {
      const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(w.row(r));
      o = warp_row(nb, [&](int64_t b) { return q8_0_block(blocks[b], x.q + 32 * b, x.d[b]); });
    } else if (w.packing == quant::RowPacking::kQ4_0x16) {
      // Group g starts where its first row started (q4_0x16.h).
      const uint8_t* group = w.row(r - r % quant::kQ4_0x16Rows);
      const int in_group = static_cast<int>(r % quant::kQ4_0x16Rows);
      o = warp_row(
          nb, [&](int64_t b) { return q4_0_block(q4_0x16_block(group, b, in_group), x.q + 32 * b, x.d[b]); });
    } else {
      const auto* blocks = reinterpret_cast<const quant::BlockQ4_0*>(w.row(r));
      o = warp_row(nb, [&](int64_t b) { return q4_0_block(blocks[b], x.q + 32 * b, x.d[b]); });
    }
  }
}

bool use_avx2() {
  static const bool avx2 = kernels::select_simd_level() != kernels::SimdLevel::kScalar;
  return avx2;
}

}  // namespace

bool warp_order_supported(GgmlType type, quant::RowPacking packing) {
  if (type == GgmlType::Q4_0)
    return packing == quant::RowPacking::kNone || packing == quant::RowPacking::kQ4_0x16;
  return type == GgmlType::Q8_0 && packing == quant::RowPacking::kNone;
}

// ggml's quantize_row_q8_0_ref as q8_block.cuh writes it: d = amax / 127, q = round(x / d) half away from
// zero through the unrounded inverse (NaN: 0), d kept as its f16 rounding.
void quantize_row_as_device(const float* x, int64_t n, const QuantizedRow& out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + 32 * b;
    float amax = std::fabs(v[0]);
    for (int k = 1; k < 32; ++k) amax = std::fmax(amax, std::fabs(v[k]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) {
      const float r = std::round(v[k] * id);
      const int q = std::isnan(r) ? 0 : static_cast<int>(r);
      const int8_t q8 = static_cast<int8_t>(static_cast<uint8_t>(q & 0xFF));
      out.q[32 * b + k] = q8;
      sum += q8;
    }
    out.d[b] = quant::fp16_to_fp32(quant::fp32_to_fp16(d));
    out.sum[b] = sum;
  }
}

void warp_order_rows(const Weight& w, int64_t row0, int64_t row1, const QuantizedRow& x, float* out,
                     bool fast) {
  if (!warp_order_supported(w.type, w.packing))
    fail("host expert rows: no warp-order path for {} ({})", ggml_type_name(w.type),
         quant::row_packing_name(w.packing));
  if (fast && w.packing == quant::RowPacking::kQ4_0x16 && use_avx2()) {
    constexpr int64_t G = quant::kQ4_0x16Rows;
    if (row0 % G != 0 || row1 % G != 0)
      fail("host expert rows: Q4_0x16 rows {}..{} split a group", row0, row1);
    for (int64_t r = row0; r < row1; r += G)
      detail::q4_0x16_group_avx2(w.row(r), w.n_in / 32, x, out + (r - row0));
    return;
  }
  reference_rows(w, row0, row1, x, out);
}

HostExpertRunner::HostExpertRunner(int n_threads) : pool_(n_threads) {}

void HostExpertRunner::reserve(size_t max_jobs, int64_t n_in, int64_t n_ff) {
  if (max_jobs <= jobs_ && n_in <= n_in_ && n_ff <= n_ff_) return;
  jobs_ = std::max(jobs_, max_jobs);
  n_in_ = std::max(n_in_, n_in);
  n_ff_ = std::max(n_ff_, n_ff);
  const size_t per = static_cast<size_t>(n_in_ + n_ff_);
  q_.assign(jobs_ * per, 0);
  d_.assign(jobs_ * per / 32, 0.0f);
  sum_.assign(jobs_ * per / 32, 0);
  h_.assign(jobs_ * static_cast<size_t>(n_ff_), 0.0f);
}

QuantizedRow HostExpertRunner::x_row(size_t j) {
  const size_t at = j * static_cast<size_t>(n_in_ + n_ff_);
  return {q_.data() + at, d_.data() + at / 32, sum_.data() + at / 32};
}

QuantizedRow HostExpertRunner::h_row(size_t j) {
  const size_t at = j * static_cast<size_t>(n_in_ + n_ff_) + static_cast<size_t>(n_in_);
  return {q_.data() + at, d_.data() + at / 32, sum_.data() + at / 32};
}

void HostExpertRunner::run(std::span<const HostExpertJob> jobs) {
  if (jobs.empty()) return;
  const HostExpertJob& j0 = jobs[0];
  const int64_t n_in = j0.gate.n_in, n_ff = j0.gate.n_out, n_out = j0.down.n_out;
  for (const HostExpertJob& j : jobs)
    if (j.gate.n_in != n_in || j.up.n_in != n_in || j.up.n_out != n_ff || j.down.n_in != n_ff ||
        j.down.n_out != n_out || n_in % 32 != 0 || n_ff % 32 != 0)
      fail("host expert rows: the entries' shapes differ or are not whole blocks");
  reserve(jobs.size(), n_in, n_ff);
  for (size_t j = 0; j < jobs.size(); ++j) quantize_row_as_device(jobs[j].x, n_in, x_row(j));
  // Tasks of 32 rows (two Q4_0x16 groups): enough tasks for every thread with one expert, few per row.
  constexpr int64_t kRows = 32;
  const auto tasks_of = [](int64_t rows) { return (rows + kRows - 1) / kRows; };
  const int64_t ff_tasks = tasks_of(n_ff), out_tasks = tasks_of(n_out);
  pool_.run_tasks(static_cast<int64_t>(jobs.size()) * ff_tasks, [&](int, int64_t task) {
    const size_t j = static_cast<size_t>(task / ff_tasks);
    const int64_t r0 = (task % ff_tasks) * kRows, r1 = std::min(n_ff, r0 + kRows);
    float g[kRows], u[kRows];
    warp_order_rows(jobs[j].gate, r0, r1, x_row(j), g);
    warp_order_rows(jobs[j].up, r0, r1, x_row(j), u);
    float* h = h_.data() + j * static_cast<size_t>(n_ff_);
    for (int64_t r = r0; r < r1; ++r) h[r] = quant::portable_swiglu(g[r - r0], u[r - r0]);
  });
  for (size_t j = 0; j < jobs.size(); ++j)
    quantize_row_as_device(h_.data() + j * static_cast<size_t>(n_ff_), n_ff, h_row(j));
  pool_.run_tasks(static_cast<int64_t>(jobs.size()) * out_tasks, [&](int, int64_t task) {
    const size_t j = static_cast<size_t>(task / out_tasks);
    const int64_t r0 = (task % out_tasks) * kRows, r1 = std::min(n_out, r0 + kRows);
    warp_order_rows(jobs[j].down, r0, r1, h_row(j), jobs[j].v + r0);
  });
}

}  // namespace df::backend::cuda_host
