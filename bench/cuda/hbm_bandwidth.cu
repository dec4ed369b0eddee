// The ceiling a decode figure is compared with: how fast this GPU reads its memory, measured the way a
// matrix-vector product reads weights (every byte once, 16-byte loads, a reduction so nothing is optimised
// away), plus cudaMemcpy device-to-device for reference, and host-to-device from page-locked memory (the
// link the expert tiers copy records over: their ceiling). Prints one JSON line.
//   df_cuda_bandwidth [GiB=4] [repeats=20] [host GiB=0 [record bytes=5308416]]
// With host GiB > 0 it also measures the copies as the RAM tier makes them: from a region of that size on
// transparent huge pages, registered with cudaHostRegister (the RAM tier's pool), one record at a time from
// scattered record-aligned offsets ("h2d_registered_GBps").
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

__global__ void read_all(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *out = acc;  // almost never: keeps the loads
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 4.0;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  const size_t bytes = static_cast<size_t>(gib * (1ull << 30)) / 16 * 16;
  void *a = nullptr, *b = nullptr;
  unsigned* out = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMalloc(&out, sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  read_all<<<sms * 8, 512>>>(static_cast<const uint4*>(a), bytes / 16, out);  // warm
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEventRecord(t0);
  for (int r = 0; r < repeats; ++r) read_all<<<sms * 8, 512>>>(static_cast<const uint4*>(a), bytes / 16, out);
  cudaEventRecord(t1);
  check(cudaEventSynchronize(t1), "read kernel");
  float read_ms = 0;
  cudaEventElapsedTime(&read_ms, t0, t1);
  cudaEventRecord(t0);
  for (int r = 0; r < repeats; ++r) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(t1);
  check(cudaEventSynchronize(t1), "copy");
  float copy_ms = 0;
  cudaEventElapsedTime(&copy_ms, t0, t1);
  // Host to device from pinned memory, in records of 4 MiB (the size of an lfm2-24b expert record), 1 GiB.
  const size_t h2d_bytes = std::min<size_t>(bytes, size_t{1} << 30), chunk = size_t{4} << 20;
  void* host = nullptr;
  check(cudaHostAlloc(&host, h2d_bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(host, 1, h2d_bytes);
  check(cudaMemcpy(b, host, h2d_bytes, cudaMemcpyHostToDevice), "warm h2d");
  cudaEventRecord(t0);
  for (int r = 0; r < 4; ++r)
    for (size_t off = 0; off + chunk <= h2d_bytes; off += chunk)
      cudaMemcpyAsync(static_cast<char*>(b) + off, static_cast<char*>(host) + off, chunk,
                      cudaMemcpyHostToDevice);
  cudaEventRecord(t1);
  check(cudaEventSynchronize(t1), "h2d");
  float h2d_ms = 0;
  cudaEventElapsedTime(&h2d_ms, t0, t1);
  const double h2d_gbs = 4.0 * double(h2d_bytes / chunk * chunk) / (h2d_ms * 1e-3) / 1e9;
  double reg_gbs = 0;
  const double host_gib = argc > 3 ? std::atof(argv[3]) : 0.0;
  const size_t record = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 5308416;
  if (host_gib > 0 && record > 0 && record <= bytes) {
    const size_t region = static_cast<size_t>(host_gib * (1ull << 30)) / record * record;
    void* r = mmap(nullptr, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
      std::fprintf(stderr, "mmap of %zu bytes failed\n", region);
      return 1;
    }
    madvise(r, region, MADV_HUGEPAGE);
    std::memset(r, 1, region);
    check(cudaHostRegister(r, region, cudaHostRegisterPortable), "cudaHostRegister");
    const size_t n_records = region / record, slots = std::max<size_t>(1, bytes / record);
    const int copies = 512;
    uint64_t state = 88172645463325252ull;  // xorshift: scattered records, the same each run
    auto next = [&] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
    };
    cudaEventRecord(t0);
    for (int c = 0; c < copies; ++c)
      cudaMemcpyAsync(static_cast<char*>(b) + (c % slots) * record,
                      static_cast<char*>(r) + (next() % n_records) * record, record, cudaMemcpyHostToDevice);
    cudaEventRecord(t1);
    check(cudaEventSynchronize(t1), "h2d registered");
    float reg_ms = 0;
    cudaEventElapsedTime(&reg_ms, t0, t1);
    reg_gbs = double(copies) * double(record) / (reg_ms * 1e-3) / 1e9;
    cudaHostUnregister(r);
    munmap(r, region);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double read_gbs = double(bytes) * repeats / (read_ms * 1e-3) / 1e9;
  const double copy_gbs = 2.0 * double(bytes) * repeats / (copy_ms * 1e-3) / 1e9;  // read + write
  std::printf(
      "{\"gpu\":\"%s\",\"bytes\":%zu,\"read_GBps\":%.1f,\"copy_GBps\":%.1f,\"h2d_pinned_GBps\":%.1f,"
      "\"h2d_registered_GBps\":%.1f}\n",
      prop.name, bytes, read_gbs, copy_gbs, h2d_gbs, reg_gbs);
  return 0;
}
