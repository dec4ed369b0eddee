// The warp-order rows of a Q4_0x16 group, sixteen rows at once in two 8-float registers (warp_order.h): the
// same integer sums, the same float operations in the same order as the scalar reference, so the same bits.
#include <immintrin.h>

#include "backend/cuda_host/warp_order.h"
#include "quant/q4_0x16.h"

namespace df::backend::cuda_host::detail {

void q4_0x16_group_avx2(const uint8_t* group, int64_t nb, const QuantizedRow& x, float* out16) {
  constexpr int kLanes = 32;
  // lane[l][h]: warp lane l's running sum for rows 8h..8h+7, from +0 as the kernel's accumulator starts.
  __m256 lane[kLanes][2];
  for (auto& l : lane) l[0] = l[1] = _mm256_setzero_ps();
  const __m256i nibbles = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const auto* blocks = reinterpret_cast<const quant::BlockQ4_0x16*>(group);
  for (int64_t b = 0; b < nb; ++b) {
    const quant::BlockQ4_0x16& blk = blocks[b];
    const int8_t* a = x.q + 32 * b;
    int32_t a_words[8];
    __builtin_memcpy(a_words, a, 32);
    // The sum of (q - 8) a over the block is sum(q a) - 8 sum(a); each maddubs pair is at most 2 * 15 * 128
    // in magnitude, so the eight of a block add in 16 bits without overflow.
    __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = 0; j < 4; ++j) {
      const __m256i a_lo = _mm256_set1_epi32(a_words[j]);      // elements 4j..4j+3
      const __m256i a_hi = _mm256_set1_epi32(a_words[4 + j]);  // elements 16+4j..
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&blk.qs[j][8 * h][0]));
        const __m256i lo = _mm256_and_si256(w, nibbles);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibbles);
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(lo, a_lo));
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(hi, a_hi));
      }
    }
    const __m256i offset = _mm256_set1_epi32(8 * x.sum[b]);
    const __m256 dx = _mm256_set1_ps(x.d[b]);
    for (int h = 0; h < 2; ++h) {
      const __m256i sumi = _mm256_sub_epi32(_mm256_madd_epi16(s16[h], ones16), offset);
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&blk.d[8 * h])));
      const __m256 c = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sumi), dw), dx);
      __m256& l = lane[b % kLanes][h];
      l = _mm256_add_ps(l, c);
    }
  }
  for (int o = kLanes / 2; o > 0; o >>= 1)
    for (int j = 0; j < o; ++j)
      for (int h = 0; h < 2; ++h) lane[j][h] = _mm256_add_ps(lane[j][h], lane[j + o][h]);
  _mm256_storeu_ps(out16, lane[0][0]);
  _mm256_storeu_ps(out16 + 8, lane[0][1]);
}

}  // namespace df::backend::cuda_host::detail
