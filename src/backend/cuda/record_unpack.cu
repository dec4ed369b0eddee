// Q4_0x16 groups back to Q4_0 rows on the GPU (quant/q4_0x16.h has the layout and the host reference): the
// expert tiers copy a store record up as it is and unpack it in VRAM, so that the host spends no time on it.
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kGroupRows = 16;
constexpr int kBlockBytes = 18;                             // Q4_0: f16 scale + 16 bytes of nibbles
constexpr int kGroupBlockBytes = kGroupRows * kBlockBytes;  // one packed block of 16 rows: 288 bytes

// One thread per output Q4_0 block (row r of group g, block k).
__global__ void unpack_q4_0x16_kernel(const uint8_t* __restrict__ packed, int64_t n_groups, int64_t nb,
                                      uint8_t* __restrict__ rows) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = n_groups * nb * kGroupRows;
  if (i >= total) return;
  const int r = static_cast<int>(i % kGroupRows);
  const int64_t k = (i / kGroupRows) % nb;
  const int64_t g = i / (kGroupRows * nb);
  const uint8_t* src = packed + (g * nb + k) * kGroupBlockBytes;
  uint8_t* dst = rows + ((g * kGroupRows + r) * nb + k) * kBlockBytes;
  dst[0] = src[2 * r];
  dst[1] = src[2 * r + 1];
  const uint8_t* qs = src + 2 * kGroupRows;  // qs[j][r][b] at qs + (j * 16 + r) * 4 + b
  for (int j = 0; j < 4; ++j)
    for (int b = 0; b < 4; ++b) dst[2 + 4 * j + b] = qs[(j * kGroupRows + r) * 4 + b];
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
