// IEEE binary16 and bfloat16 conversions, table-free.
#include <bit>
#include <cstdint>

#include "quant/quant.h"
#include "quant/quant_detail.h"  // no FMA contraction

namespace df::quant {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  uint32_t bits;
  if ((magnitude & 0x7c00u) == 0x7c00u) {
    bits = 0x7f800000u | ((magnitude & 0x03ffu) << 13);  // inf, or NaN with its payload
  } else {
    // Shifting exponent+mantissa into float position leaves the exponent short by 127 - 15 = 112; one
    // multiplication by 2^112 rebiases normals and renormalises subnormals, exactly in both cases.
    const float scaled = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
    bits = std::bit_cast<uint32_t>(scaled);
  }
  return std::bit_cast<float>(sign | bits);
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return sign | 0x7e00u;         // NaN: ggml's scalar path returns a canonical quiet NaN
  if (magnitude >= 0x38800000u) {  // |f| >= 2^-14: a normal half, or overflow to inf
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;  // nearest, ties to even
    return static_cast<uint16_t>(sign | (rounded >= 0x7c00u ? 0x7c00u : rounded));
  }
  // Subnormal half (or zero): the half's integer mantissa is |f| * 2^24 rounded to nearest even. The scaling
  // is exact; adding 2^23 makes the FPU round to an integer, which then sits in the low mantissa bits. A
  // result of 1024 is the smallest normal half, whose encoding is also 0x0400.
  const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;
  const uint32_t mantissa = std::bit_cast<uint32_t>(scaled + 0x1p23f) - 0x4b000000u;
  return static_cast<uint16_t>(sign | mantissa);
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN, made quiet
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace df::quant
