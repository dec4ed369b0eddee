// Scalar dot products and activation quantization. The reference here is written from the format
// descriptions of ARCHITECTURES.md 12 on raw bytes (not on the block structs of quant.h) and in double, so
// it checks the layouts independently: dequantize_row must agree with it to float rounding, vec_dot must
// agree with the double-precision dot of the two dequantized rows to the rounding of its float sums, and the
// Q4_0/Q8_0 dot products must equal an integer-sum reference exactly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace {

using df::GgmlType;
namespace q = df::quant;

double half(const uint8_t* p) {
  const int h = p[0] | (p[1] << 8);
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? NAN : sign * INFINITY;
  return sign * (exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25));
}
double f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Dequantized values of a row and, per value, the sum of the magnitudes of the terms that make it (|d*sc*q|
// + |dmin*m| for formats with offsets): float rounding errors scale with that, not with the value.
struct Spec {
  std::vector<double> value, magnitude;
  void push(double v, double mag) {
    value.push_back(v);
    magnitude.push_back(mag);
  }
  void push(double v) { push(v, std::fabs(v)); }
};

void scale_min_k4(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

Spec spec_dequantize(GgmlType t, const uint8_t* p, int n) {
  Spec out;
  static constexpr int kMx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  switch (t) {
    case GgmlType::F32:
      for (int i = 0; i < n; ++i) out.push(f32_at(p + 4 * i));
      break;
    case GgmlType::F16:
      for (int i = 0; i < n; ++i) out.push(half(p + 2 * i));
      break;
    case GgmlType::BF16:
      for (int i = 0; i < n; ++i)
        out.push(std::bit_cast<float>(static_cast<uint32_t>(p[2 * i] | (p[2 * i + 1] << 8)) << 16));
      break;
    case GgmlType::Q4_0:
      for (const uint8_t* b = p; b < p + n / 32 * 18; b += 18) {
        for (int j = 0; j < 32; ++j)
          out.push(half(b) * (((j < 16 ? b[2 + j] : b[2 + j - 16] >> 4) & 0xF) - 8));
      }
      break;
    case GgmlType::Q4_1:
      for (const uint8_t* b = p; b < p + n / 32 * 20; b += 20) {
        for (int j = 0; j < 32; ++j) {
          const double dq = half(b) * ((j < 16 ? b[4 + j] : b[4 + j - 16] >> 4) & 0xF);
          out.push(dq + half(b + 2), std::fabs(dq) + std::fabs(half(b + 2)));
        }
      }
      break;
    case GgmlType::Q8_0:
      for (const uint8_t* b = p; b < p + n / 32 * 34; b += 34)
        for (int j = 0; j < 32; ++j) out.push(half(b) * static_cast<int8_t>(b[2 + j]));
      break;
    case GgmlType::Q8_1:
      for (const uint8_t* b = p; b < p + n / 32 * 36; b += 36)
        for (int j = 0; j < 32; ++j) out.push(half(b) * static_cast<int8_t>(b[4 + j]));
      break;
    case GgmlType::Q8_K:
      for (const uint8_t* b = p; b < p + n / 256 * 292; b += 292)
        for (int j = 0; j < 256; ++j) out.push(f32_at(b) * static_cast<int8_t>(b[4 + j]));
      break;
    case GgmlType::MXFP4:
      for (const uint8_t* b = p; b < p + n / 32 * 17; b += 17) {
        for (int j = 0; j < 32; ++j)
          out.push(std::ldexp(1.0, b[0] - 128) * kMx[(j < 16 ? b[1 + j] : b[1 + j - 16] >> 4) & 0xF]);
      }
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = t == GgmlType::Q5_K;
      const int size = five ? 176 : 144, qs_at = five ? 48 : 16;
      for (const uint8_t* b = p; b < p + n / 256 * size; b += size) {
        for (int e = 0; e < 256; ++e) {
          const int chunk = e / 64, l = e % 32, upper = (e / 32) % 2, sub = 2 * chunk + upper;
          int q4 = b[qs_at + 32 * chunk + l];
          q4 = upper ? q4 >> 4 : q4 & 0xF;
          if (five && (b[16 + l] >> sub) & 1) q4 += 16;
          int sc, m;
          scale_min_k4(b + 4, sub, sc, m);
          const double pos = half(b) * sc * q4, neg = half(b + 2) * m;
          out.push(pos - neg, std::fabs(pos) + std::fabs(neg));
        }
      }
      break;
    }
    case GgmlType::Q6_K:
      for (const uint8_t* b = p; b < p + n / 256 * 210; b += 210) {
        for (int e = 0; e < 256; ++e) {
          const int half_idx = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
          const uint8_t* ql = b + 64 * half_idx;
          const uint8_t* qh = b + 128 + 32 * half_idx;
          const int low = quarter == 0   ? ql[l] & 0xF
                          : quarter == 1 ? ql[l + 32] & 0xF
                          : quarter == 2 ? ql[l] >> 4
                                         : ql[l + 32] >> 4;
          const int high = (qh[l] >> (2 * quarter)) & 3;
          out.push(half(b + 208) * static_cast<int8_t>(b[192 + e / 16]) * ((low | (high << 4)) - 32));
        }
      }
      break;
    default:
      ADD_FAILURE() << "no spec dequantizer for " << df::ggml_type_name(t);
  }
  return out;
}

std::vector<float> random_row(std::mt19937& rng, int n, bool outliers) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = normal(rng) * (outliers && i % 41 == 3 ? 15.0f : 1.0f);
  return x;
}

std::vector<uint8_t> quantized(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(df::ggml_row_bytes(t, static_cast<int64_t>(x.size())));
  q::quantize_row(t, x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  return bytes;
}

const std::vector<GgmlType> kWeightTypes = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                            GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                            GgmlType::Q6_K, GgmlType::MXFP4};

std::vector<int> lengths_for(GgmlType t) {
  switch (df::ggml_traits(t).block_size) {
    case 1:
      return {1, 17, 256, 1000};
    case 32:
      return {32, 96, 256, 1024, 4096};
    default:
      return {256, 768, 4096};
  }
}

TEST(QuantSpec, DequantizeRowMatchesTheFormatDescription) {
  std::mt19937 rng(5);
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
        GgmlType::Q8_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4}) {
    const int n = 512;
    // Random bytes exercise every bit of the layout; the scale fields are then set to finite values.
    std::vector<uint8_t> bytes(df::ggml_row_bytes(t, n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const size_t size = df::ggml_traits(t).type_size;
    auto set_half = [&](size_t at) {  // a random f16 of either sign between 2^-11 and 4
      const auto h = static_cast<uint16_t>(0x1000 + rng() % 0x3400 + (rng() % 2 ? 0x8000 : 0));
      bytes[at] = static_cast<uint8_t>(h);
      bytes[at + 1] = static_cast<uint8_t>(h >> 8);
    };
    for (size_t b = 0; b < bytes.size(); b += size) {
      switch (t) {
        case GgmlType::F32: {
          const float v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
          std::memcpy(&bytes[b], &v, 4);
          break;
        }
        case GgmlType::F16:
          set_half(b);
          break;
        case GgmlType::BF16:
          bytes[b + 1] = static_cast<uint8_t>(0x3c + rng() % 8 + (rng() % 2 ? 0x80 : 0));
          break;
        case GgmlType::Q6_K:
          set_half(b + 208);
          break;
        case GgmlType::Q8_K: {
          const float d = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
          std::memcpy(&bytes[b], &d, 4);
          break;
        }
        case GgmlType::MXFP4:
          bytes[b] = static_cast<uint8_t>(100 + rng() % 50);
          break;
        case GgmlType::Q4_1:
        case GgmlType::Q8_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
          set_half(b + 2);
          [[fallthrough]];
        default:
          set_half(b);
      }
    }
    const Spec spec = spec_dequantize(t, bytes.data(), n);
    std::vector<float> ours(n);
    q::dequantize_row(t, bytes.data(), ours.data(), n);
    ASSERT_EQ(spec.value.size(), static_cast<size_t>(n)) << df::ggml_type_name(t);
    for (int i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(ours[i] - spec.value[i]), 0x1p-22 * spec.magnitude[i])
          << df::ggml_type_name(t) << " value " << i << ": ours " << ours[i] << " spec " << spec.value[i];
    }
  }
}

TEST(QuantVecDot, AgreesWithFloat64DotOfTheDequantizedRows) {
  std::mt19937 rng(17);
  for (GgmlType w : kWeightTypes) {
    const GgmlType act = q::vec_dot_type(w);
    for (int n : lengths_for(w)) {
      for (bool outliers : {false, true}) {
        const auto wbytes = quantized(w, random_row(rng, n, outliers));
        std::vector<uint8_t> abytes(df::ggml_row_bytes(act, n));
        const auto a = random_row(rng, n, !outliers);
        q::quantize_activation(act, a.data(), abytes.data(), n);
        const Spec ws = spec_dequantize(w, wbytes.data(), n), as = spec_dequantize(act, abytes.data(), n);
        double ref = 0, magnitude = 0;
        for (int i = 0; i < n; ++i) {
          ref += ws.value[i] * as.value[i];
          magnitude += ws.magnitude[i] * std::fabs(as.value[i]);
        }
        if (w == GgmlType::Q4_1) {
          // The offset multiplies Q8_1's stored s = f16(d * sum q), not f16(d) * sum q: add the difference.
          for (int b = 0; b < n / 32; ++b) {
            const uint8_t* ab = abytes.data() + 36 * b;
            int sum_q = 0;
            for (int j = 0; j < 32; ++j) sum_q += static_cast<int8_t>(ab[4 + j]);
            ref += half(wbytes.data() + 20 * b + 2) * (half(ab + 2) - half(ab) * sum_q);
          }
        }
        const int blocks = n / static_cast<int>(df::ggml_traits(w).block_size);
        // Float rounding: per block a few products, then one addition per block (8 lanes + 2 sums for the
        // K-quants); F32/F16/BF16 sum in double and round once.
        const double tolerance =
            df::ggml_traits(w).block_size == 1 ? 0x1p-22 * magnitude : (blocks + 16) * 0x1p-23 * magnitude;
        const float got = q::vec_dot(w, wbytes.data(), abytes.data(), n);
        EXPECT_NEAR(got, ref, tolerance) << df::ggml_type_name(w) << " n=" << n;
      }
    }
  }
}

TEST(QuantVecDot, Q4_0AndQ8_0EqualTheIntegerSumReferenceExactly) {
  std::mt19937 rng(23);
  for (int n : {32, 64, 1024, 4096}) {
    const auto a = random_row(rng, n, true);
    std::vector<uint8_t> abytes(df::ggml_row_bytes(GgmlType::Q8_0, n));
    q::quantize_activation(GgmlType::Q8_0, a.data(), abytes.data(), n);
    for (GgmlType w : {GgmlType::Q4_0, GgmlType::Q8_0}) {
      const auto wbytes = quantized(w, random_row(rng, n, false));
      const size_t wsize = df::ggml_traits(w).type_size;
      float expected = 0.0f;
      for (int b = 0; b < n / 32; ++b) {
        const uint8_t* wb = wbytes.data() + wsize * b;
        const uint8_t* ab = abytes.data() + 34 * b;
        int isum = 0;
        for (int j = 0; j < 32; ++j) {
          const int qw = w == GgmlType::Q8_0 ? static_cast<int8_t>(wb[2 + j])
                                             : ((j < 16 ? wb[2 + j] : wb[2 + j - 16] >> 4) & 0xF) - 8;
          isum += qw * static_cast<int8_t>(ab[2 + j]);
        }
        const auto dw = static_cast<float>(half(wb)), da = static_cast<float>(half(ab));
        // ggml's order: Q4_0 scales the integer sum by d_w then d_a; Q8_0 multiplies the scales first.
        expected +=
            w == GgmlType::Q4_0 ? static_cast<float>(isum) * dw * da : static_cast<float>(isum) * (dw * da);
      }
      EXPECT_EQ(q::vec_dot(w, wbytes.data(), abytes.data(), n), expected)
          << df::ggml_type_name(w) << " n=" << n;
    }
  }
}

TEST(QuantActivation, Q8_0RoundsHalfAwayFromZeroWithTheUnroundedScale) {
  std::mt19937 rng(3);
  const int n = 256;
  auto x = random_row(rng, n, true);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 15.5f;  // first block: halves
  x[31] = 127.0f;                                                     // amax 127: d = 1, x*id exact ties
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1}) {
    std::vector<uint8_t> bytes(df::ggml_row_bytes(t, n));
    q::quantize_activation(t, x.data(), bytes.data(), n);
    const int size = t == GgmlType::Q8_0 ? 34 : 36, qs = t == GgmlType::Q8_0 ? 2 : 4;
    for (int b = 0; b < n / 32; ++b) {
      const uint8_t* blk = bytes.data() + size * b;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
      const float d = amax / 127, id = 1.0f / d;
      EXPECT_EQ(blk[0] | (blk[1] << 8), q::fp32_to_fp16(d));
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int qv = static_cast<int8_t>(blk[qs + j]);
        EXPECT_EQ(qv, static_cast<int>(std::round(x[32 * b + j] * id))) << "block " << b << " j " << j;
        sum += qv;
      }
      if (t == GgmlType::Q8_1) {
        EXPECT_EQ(blk[2] | (blk[3] << 8), q::fp32_to_fp16(static_cast<float>(sum) * d));
      }
    }
    // The ties of the first block: -15.5 -> -16, 14.5 -> 15 (away from zero).
    EXPECT_EQ(static_cast<int8_t>(bytes[qs + 0]), -16);
    EXPECT_EQ(static_cast<int8_t>(bytes[qs + 30]), 15);
  }
}

TEST(QuantActivation, Q8_KRoundsHalfToEvenAndKeepsTheSignOfTheExtreme) {
  const int n = 512;
  std::vector<float> x(n);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 64) - 31.5f;  // halves
  x[100] = -127.0f;  // extreme negative: iscale = 1, d = 1
  std::mt19937 rng(9);
  for (int i = 256; i < n; ++i) x[i] = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  x[300] = 9.0f;  // extreme positive: d = -9/127 (negative)
  std::vector<q::BlockQ8_K> blocks(n / 256);
  q::quantize_activation(GgmlType::Q8_K, x.data(), blocks.data(), n);
  EXPECT_EQ(blocks[0].d, 1.0f);
  EXPECT_EQ(blocks[0].qs[0], -32);  // -31.5 -> -32 (even)
  EXPECT_EQ(blocks[0].qs[1], -30);  // -30.5 -> -30 (even)
  EXPECT_EQ(blocks[0].qs[63], 32);  // 31.5 -> 32
  EXPECT_EQ(blocks[0].qs[62], 30);  // 30.5 -> 30
  EXPECT_EQ(blocks[1].d, 1.0f / (-127.0f / 9.0f));
  EXPECT_LT(blocks[1].d, 0.0f);
  EXPECT_EQ(blocks[1].qs[300 - 256], -127);
  for (const auto& b : blocks) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
      EXPECT_EQ(b.bsums[g], sum);
    }
  }
  // An all-zero block is all zero, sums included.
  std::vector<float> zeros(256, 0.0f);
  q::BlockQ8_K z;
  std::memset(&z, 0xAB, sizeof z);
  q::quantize_activation(GgmlType::Q8_K, zeros.data(), &z, 256);
  EXPECT_EQ(z.d, 0.0f);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(z.qs[j], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(z.bsums[g], 0);
}

TEST(QuantActivation, FloatFormatsRoundEachValue) {
  std::mt19937 rng(4);
  const auto x = random_row(rng, 300, true);
  std::vector<uint16_t> h(300), b(300);
  std::vector<float> f(300);
  q::quantize_activation(GgmlType::F16, x.data(), h.data(), 300);
  q::quantize_activation(GgmlType::BF16, x.data(), b.data(), 300);
  q::quantize_activation(GgmlType::F32, x.data(), f.data(), 300);
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(h[i], q::fp32_to_fp16(x[i]));
    EXPECT_EQ(b[i], q::fp32_to_bf16(x[i]));
    EXPECT_EQ(f[i], x[i]);
  }
}

}  // namespace
