// Q4_0x16 groups back to Q4_0 rows on the GPU (quant/q4_0x16.h has the layout and the host reference): the
// expert tiers copy a store record up as it is and unpack it in VRAM, so that the host spends no time on it.
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kGroupRows = 16;
constexpr int kBlockBytes = 18;                             // Q4_0: f16 scale + 16 bytes of nibbles
constexpr int kGroupBlockBytes = kGroupRows * kBlockBytes;  // one packed block of 16 rows: 288 bytes

// One thread per output Q4_0 block, the blocks of a row on consecutive threads, so that a warp's stores
// cover 32 adjacent blocks (576 bytes) of one row; 2-byte stores (a row starts 2-byte aligned: 18-byte
// blocks) and 4-byte loads of the packed group (its parts start aligned: store/plan.cpp). The first version
// put the 16 rows of a group on consecutive threads and moved single bytes: 24 us a 1.7 MB matrix, longer
// than a third of the record's copy over PCIe, on the copy stream's critical path.
__global__ void unpack_q4_0x16_kernel(const uint8_t* __restrict__ packed, int64_t n_groups, int64_t nb,
                                      uint8_t* __restrict__ rows) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = n_groups * nb * kGroupRows;
  if (i >= total) return;
  const int64_t k = i % nb;
  const int64_t row = i / nb;  // g * kGroupRows + r
  const int r = static_cast<int>(row % kGroupRows);
  const int64_t g = row / kGroupRows;
  const uint8_t* src = packed + (g * nb + k) * kGroupBlockBytes;
  auto* dst = reinterpret_cast<uint16_t*>(rows + (row * nb + k) * kBlockBytes);
  dst[0] = reinterpret_cast<const uint16_t*>(src)[r];
  const auto* qs = reinterpret_cast<const uint32_t*>(src + 2 * kGroupRows);  // qs[j][r] words
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t w = qs[j * kGroupRows + r];
    dst[1 + 2 * j] = static_cast<uint16_t>(w);
    dst[2 + 2 * j] = static_cast<uint16_t>(w >> 16);
  }
}

}  // namespace

void launch_unpack_q4_0x16(const uint8_t* packed, int64_t n_out, int64_t n_in, uint8_t* rows,
                           cudaStream_t stream) {
  const int64_t nb = n_in / 32, n_groups = n_out / kGroupRows;
  const int64_t total = n_groups * nb * kGroupRows;
  if (total <= 0) return;
  constexpr int threads = 256;
  launch_kernel(unpack_q4_0x16_kernel, static_cast<unsigned>((total + threads - 1) / threads), threads, 0,
                stream, packed, n_groups, nb, rows);
  check_launch("unpack_q4_0x16");
}

}  // namespace df::backend::cuda
