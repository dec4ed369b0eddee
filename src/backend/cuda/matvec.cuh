#pragma once
// The dot products of a few weight rows against up to 8 activation rows, by one warp: the core of matmul and
// of the grouped FFN. Decode (1-8 rows) is bound by reading the weights, so each row is streamed in chunks of
// ~2 KB with 16-byte coalesced asynchronous copies into the warp's slice of shared memory (the GGUF blocks
// are 17-210 bytes and only 1- or 2-byte aligned in a row, which rules out vector loads straight into
// registers), then each lane takes whole blocks (or, for the 256-value K-quants, an eighth of a super-block,
// so that a short row still keeps all 32 lanes busy) from shared memory, decodes them once into registers and
// meets each of the NC activation rows with dp4a integer dot products. Activations are in the backend's
// aligned layout (kernels.h), read with vector loads from L1/L2 (every warp of the launch reads the same few
// KB).
//
// Numerics: each block's integer sum and its float scaling are those of the quant/ scalar reference of the
// type (the same operations in the same order, --fmad=false), so a block contributes the same float as on
// the CPU; the blocks' contributions are then summed in a different order (per lane, then across the warp).
// F32/F16/BF16 multiply in float and accumulate in double, as ggml's scalar dot products do.
#include <utility>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {

// Shared memory per staged row: at most the largest chunk (64 Q8_0 or 128 MXFP4 blocks, 2176 bytes), with 16
// bytes of alignment slack in front and 16 behind (lds_words reads one word past its last); smem_slot<T>()
// is the slot of weight type T (1200 bytes for Q4_0), so that more blocks fit an SM.
constexpr int kChunkBytesMax = 2176;
template <class T>
__host__ __device__ constexpr int smem_slot() {
  return (T::kChunkBlocks * T::kBlockBytes + 48 + 15) / 16 * 16;
}
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ int4 ld_act16(const uint8_t* p) { return *reinterpret_cast<const int4*>(p); }
__device__ __forceinline__ int2 ld_act8(const uint8_t* p) { return *reinterpret_cast<const int2*>(p); }
__device__ __forceinline__ const float* act_scales(const uint8_t* act, int64_t n) {
  return reinterpret_cast<const float*>(act + n);
}
__device__ __forceinline__ int dot4x4(const uint32_t (&q)[4], int4 a, int s) {
  s = __dp4a(static_cast<int>(q[0]), a.x, s);
  s = __dp4a(static_cast<int>(q[1]), a.y, s);
  s = __dp4a(static_cast<int>(q[2]), a.z, s);
  return __dp4a(static_cast<int>(q[3]), a.w, s);
}

// A block's f16 scale at byte offset off of shared memory, one 16-bit load: off is even for the types that
// read it so (Q4_0 and Q8_0: blocks of 18 and 34 bytes, rows at even addresses, which check_weight and the
// routed experts' stride check in ops_matmul.cpp ask of every weight the products read). Their quant words
// then come from one pass of lds_words at off + 2: the block's words from off and a second funnel shift each
// cost five and nine instructions more a block and row (session 35).
__device__ __forceinline__ uint16_t lds_half(const uint8_t* s, int off) {
  return *reinterpret_cast<const uint16_t*>(s + off);
}

// ---- Weight types. Each has: kBlockBytes, kBlockValues, kParts (lane units per block), kChunkBlocks (blocks
// staged per step), Acc (accumulator type), Unit (a lane's decoded share of a block), load() from shared
// memory, and either dot() with one activation row or act_block() and dot_block() (HasActBlock: Q4_0).

// Q4_0 meets the activation through act_block/dot_block (HasActBlock below): the weights stay unsigned
// nibbles and the block's integer sum is Σ q·a - 8 Σ a, the same integer as Σ (q - 8)·a, with Σ a formed
// once per activation block for all of a warp's weight rows instead of eight emulated byte subtractions
// (__vsub4) per block and row.
struct TQ4_0 {
  static constexpr GgmlType kType = GgmlType::Q4_0;
  static constexpr int kBlockBytes = 18, kBlockValues = 32, kParts = 1, kChunkBlocks = 64;
  using Acc = float;
  struct Unit {
    float d;
    uint32_t lo[4], hi[4];  // q in [0, 16) as bytes: elements 0..15 and 16..31
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    uint32_t q[4];
    lds_words<4>(s, off + 2, q);
    Unit u;
    u.d = f16_to_f32(lds_half(s, off));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u.lo[k] = q[k] & 0x0F0F0F0Fu;
      u.hi[k] = (q[k] >> 4) & 0x0F0F0F0Fu;
    }
    return u;
  }
  struct ActBlock {
    int4 lo, hi;
    int bias;  // -8 Σ a
    float d;
  };
  __device__ static ActBlock act_block(const uint8_t* act, int64_t n, int64_t b) {
    constexpr uint32_t kOnes[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
    ActBlock a;
    a.lo = ld_act16(act + b * 32);
    a.hi = ld_act16(act + b * 32 + 16);
    a.bias = -8 * dot4x4(kOnes, a.hi, dot4x4(kOnes, a.lo, 0));
    a.d = act_scales(act, n)[b];
    return a;
  }
  __device__ static float dot_block(const Unit& u, const ActBlock& a) {
    const int s = dot4x4(u.hi, a.hi, dot4x4(u.lo, a.lo, a.bias));
    return static_cast<float>(s) * u.d * a.d;  // (sumi * dx) * dy, as dot_q4_0_q8_0
  }
};

struct TQ4_1 {
  static constexpr GgmlType kType = GgmlType::Q4_1;
  static constexpr int kBlockBytes = 20, kBlockValues = 32, kParts = 1, kChunkBlocks = 64;
  using Acc = float;
  struct Unit {
    float d, m;
    uint32_t lo[4], hi[4];
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    uint32_t w[5];
    lds_words<5>(s, off, w);
    Unit u;
    u.d = f16_to_f32(static_cast<uint16_t>(w[0]));
    u.m = f16_to_f32(static_cast<uint16_t>(w[0] >> 16));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u.lo[k] = w[k + 1] & 0x0F0F0F0Fu;
      u.hi[k] = (w[k + 1] >> 4) & 0x0F0F0F0Fu;
    }
    return u;
  }
  __device__ static float dot(const Unit& u, const uint8_t* act, int64_t n, int64_t b, int) {
    const int s = dot4x4(u.hi, ld_act16(act + b * 32 + 16), dot4x4(u.lo, ld_act16(act + b * 32), 0));
    const float* sc = act_scales(act, n);
    return (u.d * sc[b]) * static_cast<float>(s) + u.m * sc[n / 32 + b];  // as dot_q4_1_q8_1
  }
};

struct TQ8_0 {
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static constexpr int kBlockBytes = 34, kBlockValues = 32, kParts = 1, kChunkBlocks = 64;
  using Acc = float;
  struct Unit {
    float d;
    uint32_t q[8];
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    Unit u;
    lds_words<8>(s, off + 2, u.q);
    u.d = f16_to_f32(lds_half(s, off));
    return u;
  }
  __device__ static float dot(const Unit& u, const uint8_t* act, int64_t n, int64_t b, int) {
    const int4 a0 = ld_act16(act + b * 32), a1 = ld_act16(act + b * 32 + 16);
    int s = 0;
    s = __dp4a(static_cast<int>(u.q[0]), a0.x, s);
    s = __dp4a(static_cast<int>(u.q[1]), a0.y, s);
    s = __dp4a(static_cast<int>(u.q[2]), a0.z, s);
    s = __dp4a(static_cast<int>(u.q[3]), a0.w, s);
    s = __dp4a(static_cast<int>(u.q[4]), a1.x, s);
    s = __dp4a(static_cast<int>(u.q[5]), a1.y, s);
    s = __dp4a(static_cast<int>(u.q[6]), a1.z, s);
    s = __dp4a(static_cast<int>(u.q[7]), a1.w, s);
    return static_cast<float>(s) * (u.d * act_scales(act, n)[b]);  // as dot_q8_0_q8_0
  }
};

// The E2M1 code table (quant::kMxfp4Values, doubled values) as four words for __byte_perm lookups.
__device__ __forceinline__ void mxfp4_lookup(uint32_t q, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t t0 = 0x03020100u, t1 = 0x0C080604u, t2 = 0xFDFEFF00u, t3 = 0xF4F8FAFCu;
  // Each nibble of q picks a byte of the 16-byte table: its low 3 bits within a half, bit 3 the half.
  const uint32_t sel = 0x32103210u | ((q & 0x88888888u) >> 1);
  uint32_t tmp[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t shift = 16 * i;
    const uint32_t l = __byte_perm(t0, t1, q >> shift);
    const uint32_t h = __byte_perm(t2, t3, q >> shift);
    tmp[i] = __byte_perm(l, h, sel >> shift);
  }
  lo = __byte_perm(tmp[0], tmp[1], 0x6420);  // the values of the low nibbles, byte order kept
  hi = __byte_perm(tmp[0], tmp[1], 0x7531);
}

struct TMXFP4 {
  static constexpr GgmlType kType = GgmlType::MXFP4;
  static constexpr int kBlockBytes = 17, kBlockValues = 32, kParts = 1, kChunkBlocks = 128;
  using Acc = float;
  struct Unit {
    float d;
    uint32_t lo[4], hi[4];
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    uint32_t q[4];
    lds_words<4>(s, off + 1, q);
    Unit u;
    u.d = e8m0_half(s[off]);
#pragma unroll
    for (int k = 0; k < 4; ++k) mxfp4_lookup(q[k], u.lo[k], u.hi[k]);
    return u;
  }
  __device__ static float dot(const Unit& u, const uint8_t* act, int64_t n, int64_t b, int) {
    const int s = dot4x4(u.hi, ld_act16(act + b * 32 + 16), dot4x4(u.lo, ld_act16(act + b * 32), 0));
    return (act_scales(act, n)[b] * u.d) * static_cast<float>(s);  // as dot_mxfp4_q8_0
  }
};

// Q8_K activation pieces: d per 256 values, then the sums of 16 values.
__device__ __forceinline__ const int16_t* q8k_bsums(const uint8_t* act, int64_t n) {
  return reinterpret_cast<const int16_t*>(act + n + (n / 256) * 4);
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j from the 12 scale bytes (quant::unpack_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(const uint32_t (&sw)[3], int j, int& sc, int& m) {
  if (j < 4) {
    sc = static_cast<int>(byte_of(sw, j) & 63);
    m = static_cast<int>(byte_of(sw, j + 4) & 63);
  } else {
    sc = static_cast<int>((byte_of(sw, j + 4) & 0xF) | ((byte_of(sw, j - 4) >> 6) << 4));
    m = static_cast<int>((byte_of(sw, j + 4) >> 4) | ((byte_of(sw, j) >> 6) << 4));
  }
}

// Q4_K and Q5_K: part p of a super-block is chunk c = p / 2 (64 values), half hh = p % 2: 16 quant bytes
// whose low nibbles are values 64c + 16hh + [0, 16) (sub-block 2c) and high nibbles the same + 32 (2c + 1).
template <bool kQ5>
struct TQxK {
  static constexpr GgmlType kType = kQ5 ? GgmlType::Q5_K : GgmlType::Q4_K;
  static constexpr int kBlockBytes = kQ5 ? 176 : 144, kBlockValues = 256, kParts = 8, kChunkBlocks = 8;
  using Acc = float;
  struct Unit {
    float d, dmin;
    int sc_lo, sc_hi, m_lo, m_hi;
    uint32_t lo[4], hi[4];
  };
  __device__ static Unit load(const uint8_t* s, int off, int p) {
    const int c = p >> 1, hh = p & 1;
    uint32_t head[4];  // d, dmin, 12 scale bytes
    lds_words<4>(s, off, head);
    Unit u;
    u.d = f16_to_f32(static_cast<uint16_t>(head[0]));
    u.dmin = f16_to_f32(static_cast<uint16_t>(head[0] >> 16));
    const uint32_t sw[3] = {head[1], head[2], head[3]};
    scale_min_k4(sw, 2 * c, u.sc_lo, u.m_lo);
    scale_min_k4(sw, 2 * c + 1, u.sc_hi, u.m_hi);
    uint32_t q[4];
    lds_words<4>(s, off + (kQ5 ? 48 : 16) + 32 * c + 16 * hh, q);
    uint32_t qh[4] = {0, 0, 0, 0};
    if (kQ5) lds_words<4>(s, off + 16 + 16 * hh, qh);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u.lo[k] = q[k] & 0x0F0F0F0Fu;
      u.hi[k] = (q[k] >> 4) & 0x0F0F0F0Fu;
      if (kQ5) {
        u.lo[k] |= ((qh[k] >> (2 * c)) & 0x01010101u) << 4;
        u.hi[k] |= ((qh[k] >> (2 * c + 1)) & 0x01010101u) << 4;
      }
    }
    return u;
  }
  __device__ static float dot(const Unit& u, const uint8_t* act, int64_t n, int64_t b, int p) {
    const int c = p >> 1, hh = p & 1;
    const uint8_t* qa = act + b * 256 + 64 * c + 16 * hh;
    const int dlo = dot4x4(u.lo, ld_act16(qa), 0), dhi = dot4x4(u.hi, ld_act16(qa + 32), 0);
    const int16_t* bs = q8k_bsums(act, n) + b * 16;
    const int acc = u.sc_lo * dlo + u.sc_hi * dhi;
    const int mins =
        static_cast<int>(bs[4 * c + hh]) * u.m_lo + static_cast<int>(bs[4 * c + 2 + hh]) * u.m_hi;
    const float yd = act_scales(act, n)[b];
    return (u.d * yd) * static_cast<float>(acc) - (u.dmin * yd) * static_cast<float>(mins);
  }
};
using TQ4_K = TQxK<false>;
using TQ5_K = TQxK<true>;

// Q6_K: part p is half h = p / 4 (128 values) and l0 = 8 (p % 4): the values l0 + [0, 8) + {0, 32, 64, 96}
// of the half, from ql[l0..], ql[32 + l0..] and qh[l0..] of that half.
struct TQ6_K {
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr int kBlockBytes = 210, kBlockValues = 256, kParts = 8, kChunkBlocks = 8;
  using Acc = float;
  struct Unit {
    float d;
    int sc[4];
    uint32_t v[4][2];  // q - 32 as signed bytes, for the four value groups
  };
  __device__ static Unit load(const uint8_t* s, int off, int p) {
    const int h = p >> 2, l0 = 8 * (p & 3);
    uint32_t a[2], b[2], qh[2], sw[4], dw[1];
    lds_words<2>(s, off + 64 * h + l0, a);
    lds_words<2>(s, off + 64 * h + 32 + l0, b);
    lds_words<2>(s, off + 128 + 32 * h + l0, qh);
    lds_words<4>(s, off + 192, sw);
    lds_words<1>(s, off + 208, dw);
    Unit u;
    u.d = f16_to_f32(static_cast<uint16_t>(dw[0]));
#pragma unroll
    for (int g = 0; g < 4; ++g)
      u.sc[g] = static_cast<int>(static_cast<int8_t>(byte_of(sw, 8 * h + 2 * g + (l0 >> 4))));
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      u.v[0][k] = __vsub4((a[k] & 0x0F0F0F0Fu) | (((qh[k] >> 0) & 0x03030303u) << 4), 0x20202020u);
      u.v[1][k] = __vsub4((b[k] & 0x0F0F0F0Fu) | (((qh[k] >> 2) & 0x03030303u) << 4), 0x20202020u);
      u.v[2][k] = __vsub4(((a[k] >> 4) & 0x0F0F0F0Fu) | (((qh[k] >> 4) & 0x03030303u) << 4), 0x20202020u);
      u.v[3][k] = __vsub4(((b[k] >> 4) & 0x0F0F0F0Fu) | (((qh[k] >> 6) & 0x03030303u) << 4), 0x20202020u);
    }
    return u;
  }
  __device__ static float dot(const Unit& u, const uint8_t* act, int64_t n, int64_t b, int p) {
    const int h = p >> 2, l0 = 8 * (p & 3);
    const uint8_t* qa = act + b * 256 + 128 * h + l0;
    int acc = 0;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int2 a = ld_act8(qa + 32 * g);
      acc += u.sc[g] * __dp4a(static_cast<int>(u.v[g][1]), a.y, __dp4a(static_cast<int>(u.v[g][0]), a.x, 0));
    }
    return (u.d * act_scales(act, n)[b]) * static_cast<float>(acc);  // d = dx * yd, as dot_q6_k_q8_k
  }
};

// F16 / BF16: 8 values (16 bytes) per block; float products (exact for 16-bit inputs), double sums.
template <bool kBF16>
struct THalf {
  static constexpr GgmlType kType = kBF16 ? GgmlType::BF16 : GgmlType::F16;
  static constexpr int kBlockBytes = 16, kBlockValues = 8, kParts = 1, kChunkBlocks = 128;
  using Acc = double;
  struct Unit {
    uint32_t w[4];
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    Unit u;
    lds_words<4>(s, off, u.w);
    return u;
  }
  __device__ static float cvt(uint32_t h) {
    return kBF16 ? bf16_to_f32(static_cast<uint16_t>(h)) : f16_to_f32(static_cast<uint16_t>(h));
  }
  __device__ static double dot(const Unit& u, const uint8_t* act, int64_t, int64_t b, int) {
    const int4 a = ld_act16(act + b * 16);
    const uint32_t av[4] = {static_cast<uint32_t>(a.x), static_cast<uint32_t>(a.y),
                            static_cast<uint32_t>(a.z), static_cast<uint32_t>(a.w)};
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s += static_cast<double>(__fmul_rn(cvt(u.w[k] & 0xFFFFu), cvt(av[k] & 0xFFFFu)));
      s += static_cast<double>(__fmul_rn(cvt(u.w[k] >> 16), cvt(av[k] >> 16)));
    }
    return s;
  }
};
using TF16 = THalf<false>;
using TBF16 = THalf<true>;

struct TF32 {
  static constexpr GgmlType kType = GgmlType::F32;
  static constexpr int kBlockBytes = 16, kBlockValues = 4, kParts = 1, kChunkBlocks = 128;
  using Acc = double;
  struct Unit {
    uint32_t w[4];
  };
  __device__ static Unit load(const uint8_t* s, int off, int) {
    Unit u;
    lds_words<4>(s, off, u.w);
    return u;
  }
  __device__ static double dot(const Unit& u, const uint8_t* act, int64_t, int64_t b, int) {
    const float4 a = *reinterpret_cast<const float4*>(act + b * 16);
    double s = static_cast<double>(__fmul_rn(__uint_as_float(u.w[0]), a.x));
    s += static_cast<double>(__fmul_rn(__uint_as_float(u.w[1]), a.y));
    s += static_cast<double>(__fmul_rn(__uint_as_float(u.w[2]), a.z));
    s += static_cast<double>(__fmul_rn(__uint_as_float(u.w[3]), a.w));
    return s;
  }
};

// The 16-byte copies of a lane for one row's chunk: at most the chunk's bytes plus 15 of misalignment, a
// warp's 32 lanes a round.
template <class T>
__host__ __device__ constexpr int copy_rounds() {
  return ((T::kChunkBlocks * T::kBlockBytes + 15) / 16 + 1 + kWarp - 1) / kWarp;
}

// Global -> shared copies of 16 bytes that bypass the registers (cp.async, sm_80+): a warp puts all its rows'
// chunks in flight at once and waits for them together.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Output rows per warp of the matrix-vector kernels: two, so that a decode launch (one warp per pair of rows)
// fits the GPU in one wave and each warp keeps two rows' bytes in flight.
constexpr int kRowsPerWarp = 2;

// The weight types whose decode products quantize their Q8_0 input inside the kernel
// (in_kernel_quantize_shape, the routed kernels' with_routed_traits).
__host__ __device__ constexpr bool quantizes_in_kernel(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || t == GgmlType::MXFP4;
}

// One-row decode products whose input is already quantized (by its producer: quantized_output, the dense
// FFN's quantize launch) read it from global memory inside their dot loop: one L2 round trip per loop
// iteration, after the weights of the chunk have arrived. Those of a Q8_0 input (quantizes_in_kernel's
// types) whose rows span more than one staged chunk (many iterations a lane: lfm2-24b's dense FFN down,
// 11,776 values) copy the input row into shared memory instead, in the prologue while the weights are on
// their way, when it takes at most kStagedActBytes. Rows of one chunk (the 2,048-value products) do not: the
// block-wide wait for the copy cost them more than the one or two reads it saves (session 35, ncu on an H100:
// the dense down 15.3 -> 13.2 us, the Q4_0 products 6.30 -> 6.53 us).
constexpr size_t kStagedActBytes = 16384;
__host__ __device__ constexpr bool stages_act(GgmlType t, int nc) {
  return nc == 1 && quantizes_in_kernel(t);
}
template <class T>
bool stages_act_row(int nc, int64_t n_in) {
  return stages_act(T::kType, nc) && n_in > int64_t{T::kChunkBlocks} * T::kBlockValues &&
         act_row_stride(GgmlType::Q8_0, n_in) <= kStagedActBytes;
}
// The launch choice of every one-row product with an already quantized input: f.template operator()<kStage>(
// smem) with kStage and the row's shared memory where stages_act_row picks staging, else false and 0 bytes.
template <class T, int NC, class F>
void with_act_staging(int64_t n_in, F&& f) {
  if constexpr (stages_act(T::kType, NC)) {
    if (stages_act_row<T>(NC, n_in)) {
      f.template operator()<true>(act_row_stride(GgmlType::Q8_0, n_in));
      return;
    }
  }
  f.template operator()<false>(size_t{0});
}
// The block copies the Q8_0 row at src (16-byte aligned, act_row_stride bytes) to dst and waits for it, and
// for every copy its threads have in flight. Every thread of the block must call it.
__device__ __forceinline__ void stage_act_row(const uint8_t* src, int64_t n_in, uint8_t* dst) {
  const int n16 = static_cast<int>(act_row_stride(GgmlType::Q8_0, n_in) / 16);
  for (int i = static_cast<int>(threadIdx.x); i < n16; i += static_cast<int>(blockDim.x))
    cp_async16(dst + 16 * i, src + 16 * i);
  cp_async_wait_all();
  __syncthreads();
}

// The block copies `bytes` (a multiple of 16; src and dst 16-byte aligned) of quantized activation rows from
// global to shared memory with plain 16-byte loads and synchronises. For prologues with their weights' copies
// in flight: stage_act_row waits for those too, which a one-chunk product cannot afford (session 35).
// Every thread of the block must call it.
__device__ __forceinline__ void block_copy_act_rows(const uint8_t* src, size_t bytes, uint8_t* dst) {
  const auto* from = reinterpret_cast<const int4*>(src);
  auto* to = reinterpret_cast<int4*>(dst);
  for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) to[i] = from[i];
  __syncthreads();
}

// Warps per block of a one-row decode product of type T that quantizes its input in the kernel, each warp
// staging R weight rows: eight where their staging fits the 48 KB of static shared memory, else
// kWarpsPerBlock. Every block quantizes the whole input row after its wait, on the step's critical path, so
// fewer, larger blocks repeat that less (session 28: the matmul's and the routed gate/up's 8-warp blocks,
// +2-4 % decode on lfm2-24b). Types that never quantize in the kernel keep kWarpsPerBlock (no second
// instantiation).
template <class T, int R>
constexpr int quantizing_decode_warps() {
  return quantizes_in_kernel(T::kType) && 8 * R * smem_slot<T>() <= 48 * 1024 ? 8 : kWarpsPerBlock;
}

// The grid of a matrix-vector launch: blocks of `warps` warps, kRowsPerWarp output rows a warp, over n_rows
// rows in x; y in y (column tiles or work items).
inline dim3 matvec_grid(int64_t n_rows, int warps, int64_t y) {
  const int64_t rows_per_block = static_cast<int64_t>(warps) * kRowsPerWarp;
  return dim3(static_cast<unsigned>((n_rows + rows_per_block - 1) / rows_per_block),
              static_cast<unsigned>(y));
}

// Weight types whose dot product takes the activation block in two steps: act_block (what depends on the
// activation alone, formed once per block and activation row) and dot_block (a weight unit against it).
template <class T>
concept HasActBlock = requires {
  typename T::ActBlock;
};

struct NoPrologue {
  __device__ void operator()() const {}
};

// One warp: acc[r][c] (this lane's share) = W row r · activation row c, for the R weight rows `wrows` and
// c < cols (<= NC). `act` is the first activation row, rows act_stride apart; smem the warp's
// R * smem_slot<T>() bytes. Every chunk of all R rows is copied to shared memory before any is read, so the
// warp waits for memory once per chunk, not once per row. Each row's sum is formed in the same order
// whatever R is. Every lane of the warp must call it (it synchronises the warp).
//
// prologue() runs once, after the first chunk's copies are issued and before they are waited for, and before
// `act` is read: what a kernel does there (wait for its predecessor, quantize its input into shared memory)
// overlaps the weights' trip from memory. A prologue that synchronises the block must be met by every warp
// of it, so such kernels give warps without rows of their own a valid row to read.
//
// kDiag (NC = 1): weight row r meets activation row r alone (`act` + r * act_stride): the rows of several
// experts, each against its own entry's input (the routed down product with the combine, ffn.cu).
template <class T, int NC, int R, bool kDiag = false, class Prologue = NoPrologue>
__device__ __forceinline__ void rows_dot(const uint8_t* const (&wrows)[R], int64_t n_in, const uint8_t* act,
                                         size_t act_stride, int cols, uint8_t* smem,
                                         typename T::Acc (&acc)[R][NC], Prologue prologue = {}) {
  static_assert(T::kChunkBlocks * T::kBlockBytes <= kChunkBytesMax, "chunk larger than the staging buffer");
  static_assert(!kDiag || NC == 1, "a diagonal product has one activation row per weight row");
  const int lane = threadIdx.x % kWarp;
  const int64_t nb = n_in / T::kBlockValues;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0;
  for (int64_t cb = 0; cb < nb; cb += T::kChunkBlocks) {
    const int blocks = static_cast<int>((nb - cb < T::kChunkBlocks ? nb - cb : int64_t{T::kChunkBlocks}));
    int pad[R];
    __syncwarp();  // the previous chunk's reads are done
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* g0 = wrows[r] + cb * T::kBlockBytes;
      pad[r] = static_cast<int>(reinterpret_cast<uintptr_t>(g0) & 15);
      const uint4* a0 = reinterpret_cast<const uint4*>(g0 - pad[r]);
      const int n16 = (pad[r] + blocks * T::kBlockBytes + 15) / 16;
      uint4* dst = reinterpret_cast<uint4*>(smem + r * smem_slot<T>());
      // A fixed number of predicated rounds (no loop on n16): the copies' issue was ~460 instructions a
      // warp of the routed gate/up's 8 rows and ~20 % of its time (ncu, session 36).
#pragma unroll
      for (int k = 0; k < copy_rounds<T>(); ++k)
        if (lane + k * kWarp < n16) cp_async16(dst + lane + k * kWarp, a0 + lane + k * kWarp);
    }
    if (cb == 0) prologue();
    cp_async_wait_all();
    __syncwarp();
    const int units = blocks * T::kParts;
    for (int un = lane; un < units; un += kWarp) {
      const int blk = un / T::kParts, part = un % T::kParts;
      if constexpr (HasActBlock<T>) {
        // All R rows' units first, then each activation block once for all of them (each acc[r][c] still
        // sums its blocks in the same order).
        typename T::Unit u[R];
#pragma unroll
        for (int r = 0; r < R; ++r)
          u[r] = T::load(smem + r * smem_slot<T>(), pad[r] + blk * T::kBlockBytes, part);
        if constexpr (kDiag) {
#pragma unroll
          for (int r = 0; r < R; ++r)
            acc[r][0] += T::dot_block(u[r], T::act_block(act + r * act_stride, n_in, cb + blk));
        } else {
#pragma unroll
          for (int c = 0; c < NC; ++c) {
            if (c >= cols) continue;
            const typename T::ActBlock a = T::act_block(act + c * act_stride, n_in, cb + blk);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][c] += T::dot_block(u[r], a);
          }
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const typename T::Unit u = T::load(smem + r * smem_slot<T>(), pad[r] + blk * T::kBlockBytes, part);
#pragma unroll
          for (int c = 0; c < NC; ++c)
            if (c < cols) acc[r][c] += T::dot(u, act + (kDiag ? r : c) * act_stride, n_in, cb + blk, part);
        }
      }
    }
  }
  if (nb == 0) prologue();
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = warp_sum(acc[r][c]);
}

// Calls f.template operator()<T>() for the traits T among Ts of weight type t (false: none of them is t's).
template <class... Ts, class F>
bool with_traits_among(GgmlType t, F&& f) {
  return ((t == Ts::kType ? (f.template operator()<Ts>(), true) : false) || ...);
}

// The same among every weight type's traits.
template <class F>
bool with_weight_traits(GgmlType t, F&& f) {
  return with_traits_among<TF32, TF16, TBF16, TQ4_0, TQ4_1, TQ8_0, TMXFP4, TQ4_K, TQ5_K, TQ6_K>(
      t, std::forward<F>(f));
}

// The column tile for `cols` activation rows: 1, 2, 4 or 8.
inline int col_tile(int64_t cols) {
  return cols >= 8 ? 8 : cols >= 4 ? (cols == 4 ? 4 : 8) : cols >= 2 ? (cols == 2 ? 2 : 4) : 1;
}

template <class F>
void with_col_tile(int nc, F&& f) {
  switch (nc) {
    case 1:
      f.template operator()<1>();
      break;
    case 2:
      f.template operator()<2>();
      break;
    case 4:
      f.template operator()<4>();
      break;
    default:
      f.template operator()<8>();
      break;
  }
}

}  // namespace df::backend::cuda
