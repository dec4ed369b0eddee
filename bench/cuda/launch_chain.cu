// What a decode step's chain of dependent kernels costs per link, and what the same chain costs inside one
// persistent kernel whose blocks meet at grid barriers (issue 10: the step is ~360 dependent kernels of
// 2-14 MB each, and the HBM would read its 1.36 GB in ~0.3 ms). Each phase is a matrix-vector product of
// the decode's shape: `rows` weight rows of `row_bytes` bytes (the weights, 16-byte loads, read once per
// phase, every phase its own matrix so nothing stays in L2), each row's sum mixed with the previous phase's
// output vector, so that every phase depends on the one before it. Four ways of running `phases` of them:
//   graph        one kernel a phase, captured once into a CUDA graph and replayed
//   graph_pdl    the same with programmatic dependent launch: a kernel loads its weights, then waits for
//                the previous one (griddepcontrol), as the engine's kernels do
//   persistent   one kernel, grid = SMs x resident blocks, a grid barrier between phases
//   persistent_prefetch  the same, each warp's loads of the next phase issued before the barrier
// Prints one JSON line: microseconds per phase for each and the bandwidth it implies.
//   df_cuda_launch_chain [phases=100] [rows=6144] [row_bytes=1152] [repeats=20] [persistent blocks per SM=4]
// (rows 132, row_bytes 16: phases of almost no work, i.e. the cost of the link itself.)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kThreads = 128, kWarp = 32, kLoadsPerLane = 3;  // 3 x 16 B x 32 lanes >= a 1,152-byte row

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Row {
  uint4 v[kLoadsPerLane];
};

__device__ __forceinline__ Row load_row(const uint4* w, int row, int row_vecs, int lane) {
  Row r;
#pragma unroll
  for (int i = 0; i < kLoadsPerLane; ++i) {
    const int j = lane + i * kWarp;
    r.v[i] = j < row_vecs ? __ldg(w + static_cast<size_t>(row) * row_vecs + j) : make_uint4(0, 0, 0, 0);
  }
  return r;
}

// The row's contribution mixed with the previous phase's output (x, rows floats): a warp reduction, as a
// product's row sum is.
__device__ __forceinline__ void finish_row(const Row& r, const float* x, float* y, int row, int rows,
                                           int lane) {
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < kLoadsPerLane; ++i) acc ^= r.v[i].x ^ r.v[i].y ^ r.v[i].z ^ r.v[i].w;
  float s = static_cast<float>(acc & 0xFF) * 1e-3f + x[(row * 7 + lane) % rows];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = s * 0.5f;
}

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch() { asm volatile("griddepcontrol.launch_dependents;"); }

// One phase, a warp per row.
template <bool kPdl>
__global__ void __launch_bounds__(kThreads)
    phase_kernel(const uint4* w, int rows, int row_vecs, const float* x, float* y) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * (kThreads / kWarp) + threadIdx.x / kWarp;
  const Row r = load_row(w, row < rows ? row : rows - 1, row_vecs, lane);
  if (kPdl) {
    pdl_wait();
    pdl_launch();
  }
  if (row < rows) finish_row(r, x, y, row, rows, lane);
}

// A sense-reversing grid barrier: every block of the grid must be resident (the grid is sized from the
// occupancy calculator).
__device__ __forceinline__ void grid_barrier(unsigned* count, volatile unsigned* generation,
                                             unsigned blocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned g = *generation;
    __threadfence();
    if (atomicAdd(count, 1u) == blocks - 1) {
      *count = 0;
      __threadfence();
      atomicAdd(const_cast<unsigned*>(generation), 1u);
    } else {
      while (*generation == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

template <bool kPrefetch>
__global__ void __launch_bounds__(kThreads)
    persistent_kernel(const uint4* w, size_t phase_vecs, int phases, int rows, int row_vecs, float* buf,
                      unsigned* count, unsigned* generation) {
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (kThreads / kWarp);
  const int warp = blockIdx.x * (kThreads / kWarp) + threadIdx.x / kWarp;
  const int my_rows = (rows - warp + warps - 1) / warps;  // rows warp, warp + warps, ...
  for (int p = 0; p < phases; ++p) {
    const uint4* wp = w + static_cast<size_t>(p) * phase_vecs;
    const float* x = buf + (p % 2) * rows;
    float* y = buf + ((p + 1) % 2) * rows;
    if (kPrefetch && my_rows > 0) {
      // The first row of this phase was loaded before the barrier (below); the others now.
      const Row r0 = load_row(wp, warp, row_vecs, lane);
      for (int i = 0; i < my_rows; ++i) {
        const int row = warp + i * warps;
        const Row r = i == 0 ? r0 : load_row(wp, row, row_vecs, lane);
        finish_row(r, x, y, row, rows, lane);
      }
    } else {
      for (int row = warp; row < rows; row += warps)
        finish_row(load_row(wp, row, row_vecs, lane), x, y, row, rows, lane);
    }
    if (kPrefetch && p + 1 < phases && warp < rows) {
      // Touch the next phase's first row so that its lines are in L2 when the barrier opens.
      const uint4* wn = w + static_cast<size_t>(p + 1) * phase_vecs + static_cast<size_t>(warp) * row_vecs;
      for (int j = lane; j < row_vecs; j += kWarp) asm volatile("prefetch.global.L2 [%0];" ::"l"(wn + j));
    }
    grid_barrier(count, generation, gridDim.x);
  }
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int phases = argc > 1 ? std::atoi(argv[1]) : 100;
  const int rows = argc > 2 ? std::atoi(argv[2]) : 6144;
  const int row_bytes = argc > 3 ? std::atoi(argv[3]) : 1152;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 20;
  const int blocks_cap = argc > 5 ? std::atoi(argv[5]) : 4;
  if (blocks_cap < 1 || phases < 1 || rows < 1 || row_bytes < 16 || row_bytes % 16 != 0 ||
      row_bytes > kLoadsPerLane * kWarp * 16 || repeats < 1) {
    std::fprintf(
        stderr,
        "usage: df_cuda_launch_chain [phases] [rows] [row_bytes: 16..%d, a multiple of 16] [repeats] "
        "[persistent blocks per SM]\n",
        kLoadsPerLane * kWarp * 16);
    return 2;
  }
  const int row_vecs = row_bytes / 16;
  const size_t phase_vecs = static_cast<size_t>(rows) * row_vecs;
  const size_t weight_bytes = phase_vecs * 16 * static_cast<size_t>(phases);
  uint4* w = nullptr;
  float* buf = nullptr;
  unsigned* sync = nullptr;
  check(cudaMalloc(&w, weight_bytes), "cudaMalloc weights");
  check(cudaMemset(w, 3, weight_bytes), "cudaMemset");
  check(cudaMalloc(&buf, 2 * sizeof(float) * static_cast<size_t>(rows) * (phases + 1)), "cudaMalloc buf");
  check(cudaMemset(buf, 0, 2 * sizeof(float) * static_cast<size_t>(rows) * (phases + 1)), "cudaMemset");
  check(cudaMalloc(&sync, 2 * sizeof(unsigned)), "cudaMalloc sync");
  check(cudaMemset(sync, 0, 2 * sizeof(unsigned)), "cudaMemset");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  auto graph_of = [&](bool pdl) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture");
    const unsigned blocks = static_cast<unsigned>((rows + kThreads / kWarp - 1) / (kThreads / kWarp));
    for (int p = 0; p < phases; ++p) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = blocks;
      cfg.blockDim = kThreads;
      cfg.stream = s;
      cudaLaunchAttribute attr[1]{};
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = pdl ? 1 : 0;
      const float* x = buf + static_cast<size_t>(p) * rows;
      float* y = buf + static_cast<size_t>(p + 1) * rows;
      check(cudaLaunchKernelEx(&cfg, pdl ? phase_kernel<true> : phase_kernel<false>,
                               static_cast<const uint4*>(w + static_cast<size_t>(p) * phase_vecs), rows,
                               row_vecs, x, y),
            "launch");
    }
    check(cudaStreamEndCapture(s, &g), "end capture");
    check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    cudaGraphDestroy(g);
    return ge;
  };
  auto run_graph = [&](cudaGraphExec_t ge) {
    check(cudaGraphLaunch(ge, s), "graph launch");  // warm
    check(cudaStreamSynchronize(s), "sync");
    cudaEventRecord(e0, s);
    for (int r = 0; r < repeats; ++r) check(cudaGraphLaunch(ge, s), "graph launch");
    cudaEventRecord(e1, s);
    check(cudaEventSynchronize(e1), "graph run");
    return time_ms(e0, e1) * 1000.0 / (repeats * phases);
  };
  int sms = 0, per_sm = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  auto run_persistent = [&](bool prefetch) {
    auto kernel = prefetch ? persistent_kernel<true> : persistent_kernel<false>;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0), "occupancy");
    per_sm = per_sm < blocks_cap ? per_sm : blocks_cap;
    const unsigned blocks = static_cast<unsigned>(sms * per_sm);
    auto once = [&] {
      kernel<<<blocks, kThreads, 0, s>>>(w, phase_vecs, phases, rows, row_vecs, buf, sync, sync + 1);
      check(cudaGetLastError(), "persistent launch");
    };
    once();
    check(cudaStreamSynchronize(s), "persistent warm-up");
    cudaEventRecord(e0, s);
    for (int r = 0; r < repeats; ++r) once();
    cudaEventRecord(e1, s);
    check(cudaEventSynchronize(e1), "persistent run");
    return time_ms(e0, e1) * 1000.0 / (repeats * phases);
  };

  cudaGraphExec_t plain = graph_of(false), pdl = graph_of(true);
  const double us_graph = run_graph(plain), us_pdl = run_graph(pdl);
  const double us_persistent = run_persistent(false), us_prefetch = run_persistent(true);
  cudaGraphExecDestroy(plain);
  cudaGraphExecDestroy(pdl);
  const double mb = phase_vecs * 16 / 1e6;
  auto gbps = [&](double us) { return mb / us * 1e3; };  // MB per microsecond is TB/s
  std::printf(
      "{\"phases\": %d, \"rows\": %d, \"row_bytes\": %d, \"phase_MB\": %.3f, \"sms\": %d, \"blocks_per_sm\": "
      "%d, "
      "\"us_per_phase\": {\"graph\": %.2f, \"graph_pdl\": %.2f, \"persistent\": %.2f, "
      "\"persistent_prefetch\": %.2f}, "
      "\"GBps\": {\"graph\": %.0f, \"graph_pdl\": %.0f, \"persistent\": %.0f, \"persistent_prefetch\": "
      "%.0f}}\n",
      phases, rows, row_bytes, mb, sms, per_sm, us_graph, us_pdl, us_persistent, us_prefetch, gbps(us_graph),
      gbps(us_pdl), gbps(us_persistent), gbps(us_prefetch));
  return 0;
}
