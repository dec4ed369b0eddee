// The CUDA backend against the CPU backend, op by op and weight type by weight type, on random inputs.
// Every test skips (GTEST_SKIP, with the reason) where no CUDA device can be used, so ctest passes on a
// machine without a GPU. Tolerances: relative L2 error; the quantized products see the same quantized
// activations on both backends, so only the float summation order of the blocks differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "argmax_rows.h"
#include "backend/backend_factory.h"
#include "backend/buffer_access.h"
#include "backend/cpu/cpu_backend.h"
#include "delta_net_reference.h"
#include "error_matchers.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "random_data.h"
#include "util/error.h"

#if defined(DF_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#endif

namespace df::backend {
namespace {

std::shared_ptr<Backend> cuda_backend(std::string& why) {
  try {
    return make_backend({"cuda", 1});
  } catch (const df::Error& e) {
    why = e.what();
    return nullptr;
  }
}

#define NEED_GPU()                                                  \
  std::string why_;                                                 \
  auto gpu_ = cuda_backend(why_);                                   \
  if (!gpu_) GTEST_SKIP() << "no CUDA device to test on: " << why_; \
  Backend& gpu = *gpu_;                                             \
  CpuBackend cpu_backend_(2);                                       \
  Backend& cpu = cpu_backend_;                                      \
  (void)cpu

using df::testing::quantized_rows;
using df::testing::random_floats;

template <class T>
DeviceBuffer put(Backend& b, const std::vector<T>& v) {
  DeviceBuffer buf = b.alloc_array<T>(std::max<size_t>(v.size(), 1), "test input");
  if (!v.empty()) b.upload<T>(buf.as<T>(), v.data(), v.size());
  return buf;
}

template <class T>
std::vector<T> get(Backend& b, const DeviceBuffer& buf, size_t n) {
  std::vector<T> v(n);
  b.download<T>(v.data(), buf.as<const T>(), n);
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

UploadedWeights upload(Backend& b, GgmlType t, const std::vector<uint8_t>& bytes, int64_t n_in, int64_t n_out,
                       int64_t n_matrices = 1, bool table = false) {
  WeightSource src;
  src.type = t;
  src.read = [&](uint8_t* dst) { std::memcpy(dst, bytes.data(), bytes.size()); };
  src.n_in = n_in;
  src.n_out = n_out;
  src.n_matrices = n_matrices;
  src.rows_looked_up = table;
  return b.upload_weights(src);
}

const GgmlType kMatmulTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                 GgmlType::Q6_K, GgmlType::MXFP4};

std::vector<float> run_matmul(Backend& b, GgmlType t, const std::vector<uint8_t>& wb, int64_t n_in,
                              int64_t n_out, const std::vector<float>& x, int64_t rows) {
  // CPU weights in its preferred layout are not the GGUF rows; upload_weights lays them out as it likes.
  UploadedWeights w = upload(b, t, wb, n_in, n_out);
  DeviceBuffer dx = put(b, x);
  DeviceBuffer dy = b.alloc_array<float>(static_cast<size_t>(rows * n_out), "y");
  DeviceBuffer scratch = b.alloc(std::max<size_t>(b.matmul_scratch_bytes(t, n_in, rows), 1), "scratch");
  b.matmul(w.first, dx.as<const float>(), rows, dy.as<float>(), scratch.as<uint8_t>());
  return get<float>(b, dy, static_cast<size_t>(rows * n_out));
}

TEST(CudaOps, MatmulOfEveryWeightTypeMatchesTheCpu) {
  NEED_GPU();
  for (GgmlType t : kMatmulTypes) {
    ASSERT_TRUE(gpu.supports_matmul(t)) << ggml_type_name(t);
    const bool k_quant = ggml_traits(t).block_size == 256;
    // 2880 (gpt-oss's hidden size) leaves rows only 1- or 2-byte aligned for the 32-value blocks.
    for (int64_t n_in : {int64_t{512}, k_quant ? int64_t{1024} : int64_t{2880}}) {
      // 13, 40 and 77 rows take the tensor-core kernels for Q4_0 / Q8_0 (one, two and three column tiles).
      for (int64_t rows : {1, 2, 3, 8, 13, 40, 77}) {
        const int64_t n_out = 70;
        const auto wb = quantized_rows(t, n_in, n_out, 7 + static_cast<uint32_t>(t));
        const auto x = random_floats(static_cast<size_t>(rows * n_in), 100 + static_cast<uint32_t>(rows));
        const auto yc = run_matmul(cpu, t, wb, n_in, n_out, x, rows);
        const auto yg = run_matmul(gpu, t, wb, n_in, n_out, x, rows);
        EXPECT_LT(rel_l2(yg, yc), 1e-5) << ggml_type_name(t) << " n_in " << n_in << " rows " << rows;
      }
    }
  }
}

// matmul_add: the residual after it is, bit for bit, the residual after matmul then add, for every weight
// type and for decode rows (the product's store adds) as well as prefill rows and F32 weights (the two ops).
TEST(CudaOps, MatmulAddIsMatmulThenAddBitForBit) {
  NEED_GPU();
  const int64_t n_in = 512, n_out = 70;
  for (GgmlType t : kMatmulTypes) {
    UploadedWeights w = upload(gpu, t, quantized_rows(t, n_in, n_out, 9), n_in, n_out);
    for (int64_t rows : {1, 3, 8, 13}) {
      const auto x = random_floats(static_cast<size_t>(rows * n_in), 200 + static_cast<uint32_t>(rows));
      const auto residual = random_floats(static_cast<size_t>(rows * n_out), 300);
      DeviceBuffer dx = put(gpu, x), two_ops = put(gpu, residual), one_op = put(gpu, residual);
      DeviceBuffer y = gpu.alloc_array<float>(static_cast<size_t>(rows * n_out), "y");
      DeviceBuffer scratch =
          gpu.alloc(std::max<size_t>(gpu.matmul_scratch_bytes(t, n_in, rows), 1), "scratch");
      gpu.matmul(w.first, dx.as<const float>(), rows, y.as<float>(), scratch.as<uint8_t>());
      gpu.add(two_ops.as<float>(), y.as<const float>(), rows * n_out);
      gpu.matmul_add(w.first, dx.as<const float>(), rows, y.as<float>(), one_op.as<float>(),
                     scratch.as<uint8_t>());
      const auto want = get<float>(gpu, two_ops, residual.size());
      const auto got = get<float>(gpu, one_op, residual.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << ggml_type_name(t) << " rows " << rows;
      EXPECT_GT(rel_l2(got, residual), 1e-3) << "nothing was added";
    }
  }
}

// F32 weights (routers) over many rows take the kernel that shares each activation row between several
// weight rows: every row's values are, bit for bit, those of the row alone (a prompt's routing and a decode
// step's routing choose from the same logits). 70 weight rows: the last block has only two of its four.
TEST(CudaOps, F32MatmulOfManyRowsGivesEachRowsBitsAlone) {
  NEED_GPU();
  const int64_t n_in = 2048, n_out = 70, rows = 21;
  UploadedWeights w = upload(gpu, GgmlType::F32, quantized_rows(GgmlType::F32, n_in, n_out, 15), n_in, n_out);
  const auto x = random_floats(static_cast<size_t>(rows * n_in), 16);
  DeviceBuffer dx = put(gpu, x);
  DeviceBuffer y = gpu.alloc_array<float>(static_cast<size_t>(rows * n_out), "y");
  DeviceBuffer scratch =
      gpu.alloc(std::max<size_t>(gpu.matmul_scratch_bytes(GgmlType::F32, n_in, rows), 1), "scratch");
  gpu.matmul(w.first, dx.as<const float>(), rows, y.as<float>(), scratch.as<uint8_t>());
  const auto all = get<float>(gpu, y, static_cast<size_t>(rows * n_out));
  for (int64_t r = 0; r < rows; ++r) {
    DeviceBuffer y1 = gpu.alloc_array<float>(static_cast<size_t>(n_out), "y1");
    gpu.matmul(w.first, dx.as<const float>().sub(static_cast<size_t>(r * n_in), static_cast<size_t>(n_in)), 1,
               y1.as<float>(), scratch.as<uint8_t>());
    const auto alone = get<float>(gpu, y1, static_cast<size_t>(n_out));
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + r * n_out, sizeof(float) * static_cast<size_t>(n_out)),
              0)
        << "row " << r;
  }
}

TEST(CudaOps, MatmulManyEqualsMatmulBitForBit) {
  NEED_GPU();
  const int64_t n_in = 256, rows = 3;
  const auto x = random_floats(static_cast<size_t>(rows * n_in), 5);
  DeviceBuffer dx = put(gpu, x);
  std::vector<UploadedWeights> ws;
  std::vector<DeviceBuffer> ys;
  std::vector<MatmulTask> tasks;
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16};
  for (GgmlType t : types) {
    ws.push_back(upload(gpu, t, quantized_rows(t, n_in, 40, 9), n_in, 40));
    ys.push_back(gpu.alloc_array<float>(rows * 40, "y"));
  }
  for (size_t i = 0; i < ws.size(); ++i)
    tasks.push_back({ws[i].first, dx.as<const float>(), ys[i].as<float>()});
  gpu.matmul_many(tasks, rows);
  for (size_t i = 0; i < ws.size(); ++i) {
    DeviceBuffer y1 = gpu.alloc_array<float>(rows * 40, "y1");
    DeviceBuffer scratch = gpu.alloc(gpu.matmul_scratch_bytes(types[i], n_in, rows), "scratch");
    gpu.matmul(ws[i].first, dx.as<const float>(), rows, y1.as<float>(), scratch.as<uint8_t>());
    EXPECT_EQ(get<float>(gpu, ys[i], rows * 40), get<float>(gpu, y1, rows * 40)) << ggml_type_name(types[i]);
  }
}

#if defined(DF_HAVE_CUDA)
// Decode products of one type and row length over the same rows share a launch (a layer's Q, K and V): each
// product's values are, bit for bit, those of its own matmul, whether its rows are quantized by the kernels,
// handed over by a norm, or quantized into scratch (Q6_K); five products make a group of four and one alone,
// a product of another type between two ends the group, and row counts that leave part of a block empty.
TEST(CudaOps, MatmulManyGroupsProductsOfOneTypeBitForBit) {
  NEED_GPU();
  auto& cuda = dynamic_cast<CudaBackend&>(gpu);
  const int64_t n_in = 1024;  // a row the norm hands over quantized (513-4,096 values)
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K}) {
    for (const int64_t rows : {1, 3, 8}) {
      for (const int layout : {0, 1, 2}) {  // 0: x; 1: normed x; 2: x, another type fourth
        const bool normed = layout == 1;
        const std::vector<int64_t> n_outs = {96, 40, 32, 8, 72};
        const auto x = random_floats(static_cast<size_t>(rows * n_in), 191);
        const auto nw = random_floats(static_cast<size_t>(n_in), 192);
        DeviceBuffer dx = put(gpu, x), dnw = put(gpu, nw), dxn = gpu.alloc_array<float>(rows * n_in, "xn");
        std::vector<UploadedWeights> ws;
        std::vector<DeviceBuffer> ys;
        std::vector<MatmulTask> tasks;
        for (size_t i = 0; i < n_outs.size(); ++i) {
          const GgmlType t = layout == 2 && i == 3 ? GgmlType::F16 : type;
          ws.push_back(upload(gpu, t, quantized_rows(t, n_in, n_outs[i], 193 + i), n_in, n_outs[i]));
          ys.push_back(gpu.alloc_array<float>(rows * n_outs[i], "y"));
        }
        for (size_t i = 0; i < ws.size(); ++i)
          tasks.push_back({ws[i].first, (normed ? dxn : dx).as<const float>(), ys[i].as<float>()});
        const uint64_t groups = cuda.matmul_groups_launched(), taken = cuda.quantized_rows_taken();
        if (normed)
          gpu.norm_matmul_many(dx.as<const float>(), rows, n_in, dnw.as<const float>(), 1e-5f,
                               dxn.as<float>(), tasks);
        else
          gpu.matmul_many(tasks, rows);
        const std::string what = std::string(ggml_type_name(type)) + " " + std::to_string(rows) +
                                 " rows, layout " + std::to_string(layout);
        // Four of five in one launch; or the first three, with the F16 product and the last alone.
        EXPECT_EQ(cuda.matmul_groups_launched() - groups, 1u) << what;
        // The normed rows reach every product quantized where the products would quantize them themselves.
        const bool handed =
            normed && type != GgmlType::Q6_K && cuda::in_kernel_quantize_shape(type, n_in, n_in, rows);
        EXPECT_EQ(cuda.quantized_rows_taken() - taken, handed ? n_outs.size() : 0u) << what;
        for (size_t i = 0; i < ws.size(); ++i) {
          DeviceBuffer y1 = gpu.alloc_array<float>(rows * n_outs[i], "y1");
          DeviceBuffer scratch = gpu.alloc(gpu.matmul_scratch_bytes(ws[i].first.type, n_in, rows), "scratch");
          gpu.matmul(ws[i].first, (normed ? dxn : dx).as<const float>(), rows, y1.as<float>(),
                     scratch.as<uint8_t>());
          const auto grouped = get<float>(gpu, ys[i], static_cast<size_t>(rows * n_outs[i]));
          EXPECT_EQ(grouped, get<float>(gpu, y1, static_cast<size_t>(rows * n_outs[i])))
              << what << ", product " << i;
          EXPECT_GT(rel_l2(grouped, std::vector<float>(grouped.size(), 0.0f)), 0.5)
              << what << ", product " << i;
        }
      }
    }
  }
}
#endif

// norm_matmul_many on the GPU: xn and every product the bits of the GPU's rms_norm then matmul_many, for the
// decode shapes a one-launch kernel would take and others, with and without a norm weight, in and out of a
// step graph; and within the products' tolerance of the CPU's op.
TEST(CudaOps, NormMatmulManyIsRmsNormThenMatmulManyBitForBit) {
  NEED_GPU();
  struct Case {
    GgmlType type;
    int64_t n, rows;
    bool weighted;
  };
  const Case cases[] = {{GgmlType::Q4_0, 2048, 1, true},  {GgmlType::Q4_0, 2048, 2, false},
                        {GgmlType::Q8_0, 1024, 3, true},  {GgmlType::MXFP4, 1024, 1, true},
                        {GgmlType::Q4_0, 1024, 8, true},  {GgmlType::Q4_0, 4096, 1, true},
                        {GgmlType::Q4_0, 256, 1, true},   {GgmlType::Q6_K, 2048, 1, true},
                        {GgmlType::Q4_0, 2048, 16, true}, {GgmlType::Q8_0, 3072, 2, false}};
  for (const Case& c : cases) {
    const int64_t n_outs[] = {40, 100, 8};
    const auto x = random_floats(static_cast<size_t>(c.rows * c.n), 81 + static_cast<uint32_t>(c.n), 3.0f);
    const auto norm = random_floats(static_cast<size_t>(c.n), 82, 1.0f);
    const std::string what = std::string(ggml_type_name(c.type)) + " n " + std::to_string(c.n) + " rows " +
                             std::to_string(c.rows) + (c.weighted ? "" : " no weight");
    struct Result {
      std::vector<float> xn;
      std::vector<std::vector<float>> y;
    };
    auto run = [&](Backend& b, bool fused, bool graph) {
      std::vector<UploadedWeights> ws;
      std::vector<DeviceBuffer> ys;
      for (size_t i = 0; i < 3; ++i) {
        ws.push_back(upload(b, c.type, quantized_rows(c.type, c.n, n_outs[i], 90 + static_cast<uint32_t>(i)),
                            c.n, n_outs[i]));
        ys.push_back(b.alloc_array<float>(c.rows * n_outs[i], "y"));
      }
      DeviceBuffer dx = put(b, x), dnorm = put(b, norm), dxn = b.alloc_array<float>(c.rows * c.n, "xn");
      std::vector<MatmulTask> tasks;
      for (size_t i = 0; i < 3; ++i) tasks.push_back({ws[i].first, dxn.as<const float>(), ys[i].as<float>()});
      const Buf<const float> weight = c.weighted ? dnorm.as<const float>() : Buf<const float>{};
      std::vector<Result> out;
      const uint64_t replayed = b.steps_replayed();
      // In a graph: an eager step, its capture, then replays (the step's ops launch nothing on the latter).
      for (int rep = 0; rep < (graph ? 4 : 1); ++rep) {
        std::optional<StepScope> scope;
        if (graph) scope.emplace(b, 0x4e6d00u + static_cast<uint64_t>(&c - cases));
        if (fused) {
          b.norm_matmul_many(dx.as<const float>(), c.rows, c.n, weight, 1e-5f, dxn.as<float>(), tasks);
        } else {
          b.rms_norm(dx.as<const float>(), c.rows, c.n, weight, 1e-5f, dxn.as<float>());
          b.matmul_many(tasks, c.rows);
        }
        if (scope) scope->end();
        Result r{get<float>(b, dxn, c.rows * c.n), {}};
        for (size_t i = 0; i < 3; ++i) r.y.push_back(get<float>(b, ys[i], c.rows * n_outs[i]));
        out.push_back(std::move(r));
        // Clear the outputs, so that a replay that launched nothing shows.
        b.fill_zero(dxn.as<float>());
        for (auto& y : ys) b.fill_zero(y.as<float>());
      }
      if (graph) {
        EXPECT_GT(b.steps_replayed(), replayed) << what << ": the step was never replayed";
      }
      return out;
    };
    const auto apart = run(gpu, false, false), fused = run(gpu, true, false), graphed = run(gpu, true, true),
               on_cpu = run(cpu, true, false);
    for (const auto& got : {fused[0], graphed[0], graphed[1], graphed[2], graphed[3]}) {
      EXPECT_EQ(got.xn, apart[0].xn) << what;
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got.y[i], apart[0].y[i]) << what << " product " << i;
    }
    EXPECT_LT(rel_l2(fused[0].xn, on_cpu[0].xn), 1e-6) << what;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(rel_l2(fused[0].y[i], on_cpu[0].y[i]), 1e-5) << what << " product " << i;
  }
}

struct FfnCase {
  GgmlType gate, up, down;
  Activation act;
  bool biases;
};

std::vector<float> run_ffn(Backend& b, const FfnCase& c, int64_t n_in, int64_t n_ff, int64_t n_out,
                           int n_experts, const std::vector<float>& x, int64_t x_rows) {
  UploadedWeights gate =
      upload(b, c.gate, quantized_rows(c.gate, n_in, n_ff * n_experts, 11), n_in, n_ff, n_experts);
  UploadedWeights up =
      upload(b, c.up, quantized_rows(c.up, n_in, n_ff * n_experts, 12), n_in, n_ff, n_experts);
  UploadedWeights down =
      upload(b, c.down, quantized_rows(c.down, n_ff, n_out * n_experts, 13), n_ff, n_out, n_experts);
  DeviceBuffer dx = put(b, x);
  DeviceBuffer gb = put(b, random_floats(static_cast<size_t>(n_ff), 21, 0.1f));
  DeviceBuffer ub = put(b, random_floats(static_cast<size_t>(n_ff), 22, 0.1f));
  DeviceBuffer db = put(b, random_floats(static_cast<size_t>(n_out), 23, 0.1f));
  // Experts 0..n_experts-2 take one row each (a decode step's k experts, rows scattered), the last takes
  // every row (a dense FFN or a prefill expert): out rows are distinct per FFN call, so two calls.
  std::vector<int32_t> in_rows, out_rows;
  for (int e = 0; e + 1 < n_experts; ++e) {
    in_rows.push_back(static_cast<int32_t>((e * 5) % x_rows));
    out_rows.push_back(static_cast<int32_t>(n_experts - 2 - e));
  }
  DeviceBuffer din = put(b, in_rows), dout_rows = put(b, out_rows);
  DeviceBuffer out1 = b.alloc_array<float>(static_cast<size_t>((n_experts - 1) * n_out), "out");
  DeviceBuffer out2 = b.alloc_array<float>(static_cast<size_t>(x_rows * n_out), "out");
  std::vector<FfnTask> tasks;
  for (int e = 0; e + 1 < n_experts; ++e) {
    FfnTask t;
    t.gate = gate.matrix(e);
    t.up = up.matrix(e);
    t.down = down.matrix(e);
    if (c.biases) {
      t.gate_bias = gb.as<const float>();
      t.up_bias = ub.as<const float>();
      t.down_bias = db.as<const float>();
      t.out_scale = 0.75f;
    }
    t.in_rows = din.as<const int32_t>().sub(static_cast<size_t>(e), 1);
    t.out_rows = dout_rows.as<const int32_t>().sub(static_cast<size_t>(e), 1);
    t.n_rows = 1;
    tasks.push_back(t);
  }
  ActivationParams act;
  act.kind = c.act;
  b.ffn(tasks, act, dx.as<const float>(), x_rows, out1.as<float>());
  FfnTask dense;
  dense.gate = gate.matrix(n_experts - 1);
  dense.up = up.matrix(n_experts - 1);
  dense.down = down.matrix(n_experts - 1);
  dense.n_rows = x_rows;
  b.ffn(std::span<const FfnTask>(&dense, 1), act, dx.as<const float>(), x_rows, out2.as<float>());
  auto r = get<float>(b, out1, static_cast<size_t>((n_experts - 1) * n_out));
  const auto r2 = get<float>(b, out2, static_cast<size_t>(x_rows * n_out));
  r.insert(r.end(), r2.begin(), r2.end());
  return r;
}

TEST(CudaOps, GroupedFfnMatchesTheCpu) {
  NEED_GPU();
  const FfnCase cases[] = {
      {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false},
      {GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, Activation::OaiSwiGLU, true},
      {GgmlType::F16, GgmlType::F16, GgmlType::F16, Activation::GeGLU, false},
      {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, Activation::SwiGLU, true},
      {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K, Activation::SwiGLU, false},  // gate and up differ
      {GgmlType::Q8_0, GgmlType::Q5_K, GgmlType::Q8_0, Activation::SwiGLU, false},  // and their formats
      {GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0, Activation::SwiGLU, true},   // tensor cores + biases
  };
  const int64_t n_in = 512, n_ff = 256, n_out = 256;
  // The dense FFN of 11 and 70 rows takes the tensor-core kernels where gate, up and down allow them.
  for (const int64_t x_rows : {int64_t{11}, int64_t{70}}) {
    const auto x = random_floats(static_cast<size_t>(x_rows * n_in), 3);
    for (const FfnCase& c : cases) {
      const auto oc = run_ffn(cpu, c, n_in, n_ff, n_out, 6, x, x_rows);
      const auto og = run_ffn(gpu, c, n_in, n_ff, n_out, 6, x, x_rows);
      // The activation is re-quantized (Q8) before down: a product differing in its last bit can move one
      // value to the next quantization step, hence a looser bound than a single matmul's.
      EXPECT_LT(rel_l2(og, oc), 2e-4) << ggml_type_name(c.gate) << "/" << ggml_type_name(c.up) << "/"
                                      << ggml_type_name(c.down) << " rows " << x_rows;
    }
  }
}

// A decode step's dense FFN whose down rows span several staged chunks (lfm2-24b's: 11,776 values) copies its
// quantized input row into shared memory before its products (stage_act_row): the bits of that row in a call
// of two rows, whose down product reads its input from global memory, and the CPU's values within the
// grouped FFN's bound.
TEST(CudaOps, DenseFfnOfOneRowWithLongDownRowsGivesTheBitsOfThatRowAmongTwo) {
  NEED_GPU();
  const int64_t n_in = 512, n_ff = 8192, n_out = 96;  // h: 9,216 bytes of Q8_0, past in-kernel quantization
  const auto x = random_floats(static_cast<size_t>(2 * n_in), 31, 2.0f);
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::MXFP4}) {
    auto run = [&](Backend& b, int64_t rows) {
      UploadedWeights gate = upload(b, type, quantized_rows(type, n_in, n_ff, 32), n_in, n_ff);
      UploadedWeights up = upload(b, type, quantized_rows(type, n_in, n_ff, 33), n_in, n_ff);
      UploadedWeights down = upload(b, type, quantized_rows(type, n_ff, n_out, 34), n_ff, n_out);
      DeviceBuffer dx = put(b, x), out = b.alloc_array<float>(static_cast<size_t>(rows * n_out), "out");
      FfnTask t;
      t.gate = gate.first;
      t.up = up.first;
      t.down = down.first;
      t.n_rows = rows;
      ActivationParams act;
      act.kind = Activation::SwiGLU;
      b.ffn(std::span<const FfnTask>(&t, 1), act, dx.as<const float>(), rows, out.as<float>());
      return get<float>(b, out, static_cast<size_t>(rows * n_out));
    };
    const auto one = run(gpu, 1), two = run(gpu, 2), want = run(cpu, 1);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), sizeof(float) * static_cast<size_t>(n_out)), 0)
        << ggml_type_name(type);
    EXPECT_LT(rel_l2(one, want), 2e-4) << ggml_type_name(type);
  }
}

// routed_ffn (the decode path with every expert resident: tables built on the device from the ids) against
// the CPU's, and its error for an id out of range.
struct RoutedSetup {
  UploadedWeights gate, up, down;
  DeviceBuffer dx, did, gb, ub, db, ds;
  RoutedExperts ex;
  ActivationParams act;
};
std::unique_ptr<RoutedSetup> routed_setup(Backend& b, const FfnCase& c, int64_t n_in, int64_t n_ff,
                                          int64_t n_out, int E, const std::vector<float>& x,
                                          const std::vector<int32_t>& ids,
                                          const std::vector<float>& down_scale) {
  auto r = std::make_unique<RoutedSetup>();
  r->gate = upload(b, c.gate, quantized_rows(c.gate, n_in, n_ff * E, 11), n_in, n_ff, E);
  r->up = upload(b, c.up, quantized_rows(c.up, n_in, n_ff * E, 12), n_in, n_ff, E);
  r->down = upload(b, c.down, quantized_rows(c.down, n_ff, n_out * E, 13), n_ff, n_out, E);
  r->dx = put(b, x);
  r->did = put(b, ids);
  r->gb = put(b, random_floats(static_cast<size_t>(E * n_ff), 21, 0.1f));
  r->ub = put(b, random_floats(static_cast<size_t>(E * n_ff), 22, 0.1f));
  r->db = put(b, random_floats(static_cast<size_t>(E * n_out), 23, 0.1f));
  r->ds = put(b, down_scale);
  RoutedExperts& ex = r->ex;
  ex.gate = {r->gate.first, r->gate.slab_bytes};
  ex.up = {r->up.first, r->up.slab_bytes};
  ex.down = {r->down.first, r->down.slab_bytes};
  ex.n_expert = E;
  if (c.biases) {
    ex.gate_bias = r->gb.as<const float>();
    ex.up_bias = r->ub.as<const float>();
    ex.down_bias = r->db.as<const float>();
  }
  if (!down_scale.empty()) ex.down_scale = r->ds.as<const float>();
  r->act.kind = c.act;
  return r;
}

std::vector<float> run_routed(Backend& b, const FfnCase& c, int64_t n_in, int64_t n_ff, int64_t n_out, int E,
                              const std::vector<float>& x, int64_t T, int k, const std::vector<int32_t>& ids,
                              const std::vector<float>& down_scale = {}) {
  const auto r = routed_setup(b, c, n_in, n_ff, n_out, E, x, ids, down_scale);
  DeviceBuffer out = b.alloc_array<float>(static_cast<size_t>(T * k * n_out), "out");
  b.routed_ffn(r->ex, r->act, r->did.as<const int32_t>(), T, k, r->dx.as<const float>(), out.as<float>());
  return get<float>(b, out, static_cast<size_t>(T * k * n_out));
}

TEST(CudaOps, RoutedFfnMatchesTheCpu) {
  NEED_GPU();
  const FfnCase cases[] = {
      {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false},
      {GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, Activation::OaiSwiGLU, true},
      {GgmlType::F16, GgmlType::F16, GgmlType::F16, Activation::GeGLU, false},
  };
  const int64_t n_in = 512, n_ff = 256, n_out = 256, T = 3;
  const int k = 4, E = 8;
  const auto x = random_floats(static_cast<size_t>(T * n_in), 3);
  const std::vector<int32_t> ids = {7, 0, 3, 5, 1, 1, 6, 2, 4, 0, 7, 3};
  for (const FfnCase& c : cases) {
    const auto oc = run_routed(cpu, c, n_in, n_ff, n_out, E, x, T, k, ids);
    const auto og = run_routed(gpu, c, n_in, n_ff, n_out, E, x, T, k, ids);
    EXPECT_LT(rel_l2(og, oc), 2e-4) << ggml_type_name(c.gate);
  }
  std::vector<int32_t> bad = ids;
  bad[5] = 9;
  df::testing::expect_error([&] { run_routed(gpu, cases[0], n_in, n_ff, n_out, E, x, T, k, bad); },
                            {"expert id 9 is out of range (8 experts)"});
}

// routed_ffn_add: the residual after it is, bit for bit, the residual after routed_ffn then moe_combine_add
// (the decode path forms the weighted sum inside the down product for k of 2, 4, 6, 8 and the types the
// routed kernels take; the other cases call the two ops). Rows past a warp's last (n_out not a multiple of
// the block's rows), biases, output scales, one and several tokens.
TEST(CudaOps, RoutedFfnAddIsRoutedFfnThenTheCombineBitForBit) {
  NEED_GPU();
  struct Case {
    FfnCase c;
    int k;
    int64_t n_out;
    bool scales;
  };
  const Case cases[] = {
      {{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false}, 4, 256, false},
      {{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false}, 2, 254, false},
      {{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q8_0, Activation::GeGLU, false}, 6, 250, true},
      {{GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0, Activation::SwiGLU, true}, 8, 256, false},
      {{GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, Activation::OaiSwiGLU, true}, 4, 255, false},
      {{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false}, 3, 256, false},
      {{GgmlType::F16, GgmlType::F16, GgmlType::F16, Activation::GeGLU, false}, 4, 256, false},
  };
  const int64_t n_in = 512, n_ff = 256;
  const int E = 8;
  for (const Case& cs : cases) {
    for (const int64_t T : {int64_t{1}, int64_t{3}}) {
      const auto x = random_floats(static_cast<size_t>(T * n_in), 3);
      std::mt19937 rng(static_cast<uint32_t>(cs.k * 10 + T));
      std::vector<int32_t> ids(static_cast<size_t>(T * cs.k));
      for (auto& id : ids) id = static_cast<int32_t>(rng() % E);
      const auto weights = random_floats(ids.size(), 5, 0.5f);
      const auto residual = random_floats(static_cast<size_t>(T * cs.n_out), 6);
      std::vector<float> scales;
      if (cs.scales) scales = random_floats(E, 7);
      const auto r = routed_setup(gpu, cs.c, n_in, n_ff, cs.n_out, E, x, ids, scales);
      DeviceBuffer out = gpu.alloc_array<float>(ids.size() * static_cast<size_t>(cs.n_out), "out");
      DeviceBuffer w = put(gpu, weights), two_ops = put(gpu, residual), one_op = put(gpu, residual);
      gpu.routed_ffn(r->ex, r->act, r->did.as<const int32_t>(), T, cs.k, r->dx.as<const float>(),
                     out.as<float>());
      gpu.moe_combine_add(out.as<const float>(), w.as<const float>(), T, cs.k, cs.n_out, two_ops.as<float>());
      gpu.routed_ffn_add(r->ex, r->act, r->did.as<const int32_t>(), w.as<const float>(), T, cs.k,
                         r->dx.as<const float>(), out.as<float>(), one_op.as<float>());
      const auto want = get<float>(gpu, two_ops, residual.size());
      const auto got = get<float>(gpu, one_op, residual.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << ggml_type_name(cs.c.gate) << "/" << ggml_type_name(cs.c.down) << " k " << cs.k << " T " << T
          << " n_out " << cs.n_out;
      EXPECT_GT(rel_l2(got, residual), 1e-3) << "nothing was added";
    }
  }
}

// The decode products read a Q4_0 / Q8_0 block's f16 scale with one 16-bit load: a weight at an odd address,
// or routed experts an odd number of bytes apart, is refused with an error naming it, before any kernel runs.
TEST(CudaOps, WeightsAtOddAddressesAreRefusedByName) {
  NEED_GPU();
  using df::testing::expect_error;
  const int64_t n_in = 512, n_out = 8;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    // One row more than the product reads, so that the shifted rows stay inside the allocation.
    UploadedWeights w = upload(gpu, t, quantized_rows(t, n_in, n_out + 1, 5), n_in, n_out + 1);
    Weight odd = w.first;
    odd.n_out = n_out;
    odd.data = static_cast<const uint8_t*>(w.first.data) + 1;
    DeviceBuffer dx = put(gpu, random_floats(static_cast<size_t>(n_in), 6));
    DeviceBuffer dy = gpu.alloc_array<float>(static_cast<size_t>(n_out), "y");
    DeviceBuffer scratch = gpu.alloc(std::max<size_t>(gpu.matmul_scratch_bytes(t, n_in, 1), 1), "scratch");
    expect_error([&] { gpu.matmul(odd, dx.as<const float>(), 1, dy.as<float>(), scratch.as<uint8_t>()); },
                 {"odd address", std::string(ggml_type_name(t))});
  }
  const FfnCase c{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false};
  const int64_t n_ff = 64, E = 4;
  const auto x = random_floats(static_cast<size_t>(n_in), 7);
  const std::vector<int32_t> ids = {0, 2};
  const auto r = routed_setup(gpu, c, n_in, n_ff, n_in, E, x, ids, {});
  RoutedExperts ex = r->ex;
  ex.up.stride -= 1;  // the stacks still cover every expert's rows
  DeviceBuffer out = gpu.alloc_array<float>(ids.size() * static_cast<size_t>(n_in), "out");
  expect_error(
      [&] {
        gpu.routed_ffn(ex, r->act, r->did.as<const int32_t>(), 1, 2, r->dx.as<const float>(),
                       out.as<float>());
      },
      {"even stride", std::to_string(ex.up.stride)});
}

// --cpu-misses: experts the device tier leaves in host memory (RoutedExperts::host, a negative slot) are
// computed by the host in the routed kernels' order; the residual is bit for bit the one every expert in a
// slot gives. Host matrices in the store's packing (Q4_0x16 where the rows allow it) and in ggml rows, one
// and several tokens, some and all of the entries on the host, row counts past the 32-lane wrap.
TEST(CudaOps, RoutedFfnAddWithHostExpertsGivesTheSlotsBits) {
  NEED_GPU();
  struct Case {
    GgmlType gate, down;
    int k;
    int64_t n_in, n_ff, n_out;
    quant::RowPacking packing;
  };
  const Case cases[] = {
      {GgmlType::Q4_0, GgmlType::Q4_0, 4, 2048, 1536, 2048, quant::RowPacking::kQ4_0x16},
      {GgmlType::Q4_0, GgmlType::Q4_0, 2, 512, 256, 256, quant::RowPacking::kNone},
      {GgmlType::Q4_0, GgmlType::Q4_0, 8, 1024, 512, 512, quant::RowPacking::kQ4_0x16},
      {GgmlType::Q8_0, GgmlType::Q8_0, 4, 512, 256, 250, quant::RowPacking::kNone},
      {GgmlType::Q4_0, GgmlType::Q8_0, 6, 2048, 768, 1024, quant::RowPacking::kNone},
  };
  const int E = 8;
  for (const Case& cs : cases) {
    const FfnCase fc{cs.gate, cs.gate, cs.down, Activation::SwiGLU, false};
    const auto packed = [&](GgmlType t, std::vector<uint8_t> bytes, int64_t n_in, int64_t n_out) {
      if (t != GgmlType::Q4_0 || cs.packing != quant::RowPacking::kQ4_0x16) return bytes;
      std::vector<uint8_t> out(bytes.size());
      const size_t slab = ggml_row_bytes(t, n_in) * static_cast<size_t>(n_out);
      for (int e = 0; e < E; ++e)
        quant::pack_q4_0x16(bytes.data() + e * slab, n_out, n_in, out.data() + e * slab);
      return out;
    };
    // The same bytes as routed_setup uploads (its seeds), as the RAM tier holds them.
    const auto gate_b = packed(cs.gate, quantized_rows(cs.gate, cs.n_in, cs.n_ff * E, 11), cs.n_in, cs.n_ff);
    const auto up_b = packed(cs.gate, quantized_rows(cs.gate, cs.n_in, cs.n_ff * E, 12), cs.n_in, cs.n_ff);
    const auto down_b =
        packed(cs.down, quantized_rows(cs.down, cs.n_ff, cs.n_out * E, 13), cs.n_ff, cs.n_out);
    const auto host_packing = [&](GgmlType t) {
      return t == GgmlType::Q4_0 ? cs.packing : quant::RowPacking::kNone;
    };
    const auto matrix = [&](GgmlType t, const std::vector<uint8_t>& b, int64_t n_in, int64_t n_out, int e) {
      return Weight{t, b.data() + ggml_row_bytes(t, n_in) * static_cast<size_t>(n_out * e), n_in, n_out,
                    host_packing(t)};
    };
    ASSERT_TRUE(gpu.computes_host_experts(ActivationParams{}, matrix(cs.gate, gate_b, cs.n_in, cs.n_ff, 0),
                                          matrix(cs.gate, up_b, cs.n_in, cs.n_ff, 0),
                                          matrix(cs.down, down_b, cs.n_ff, cs.n_out, 0), cs.k, false));
    for (const int64_t T : {int64_t{1}, int64_t{3}}) {
      const auto x = random_floats(static_cast<size_t>(T * cs.n_in), 3);
      std::mt19937 rng(static_cast<uint32_t>(cs.k * 10 + T));
      std::vector<int32_t> ids(static_cast<size_t>(T * cs.k));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 3 + rng() % 2) % E);
      const auto weights = random_floats(ids.size(), 5, 0.5f);
      const auto residual = random_floats(static_cast<size_t>(T * cs.n_out), 6);
      const auto r = routed_setup(gpu, fc, cs.n_in, cs.n_ff, cs.n_out, E, x, ids, {});
      DeviceBuffer out = gpu.alloc_array<float>(ids.size() * static_cast<size_t>(cs.n_out), "out");
      DeviceBuffer w = put(gpu, weights), all_slots = put(gpu, residual);
      gpu.routed_ffn_add(r->ex, r->act, r->did.as<const int32_t>(), w.as<const float>(), T, cs.k,
                         r->dx.as<const float>(), out.as<float>(), all_slots.as<float>());
      const auto want = get<float>(gpu, all_slots, residual.size());
      // The odd experts on the host, then every expert.
      for (const bool all : {false, true}) {
        std::vector<int32_t> slot_of(E);
        std::vector<HostExpert> host;
        for (int e = 0; e < E; ++e) {
          const bool on_host = all || e % 2 == 1;
          slot_of[e] = on_host ? -1 : e;
          if (on_host)
            host.push_back({e, matrix(cs.gate, gate_b, cs.n_in, cs.n_ff, e),
                            matrix(cs.gate, up_b, cs.n_in, cs.n_ff, e),
                            matrix(cs.down, down_b, cs.n_ff, cs.n_out, e)});
        }
        DeviceBuffer slots = put(gpu, slot_of), mixed = put(gpu, residual);
        RoutedExperts ex = r->ex;
        ex.slot_of = slots.as<const int32_t>();
        ex.host = host;
        gpu.routed_ffn_add(ex, r->act, r->did.as<const int32_t>(), w.as<const float>(), T, cs.k,
                           r->dx.as<const float>(), out.as<float>(), mixed.as<float>());
        const auto got = get<float>(gpu, mixed, residual.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << ggml_type_name(cs.gate) << "/" << ggml_type_name(cs.down) << " k " << cs.k << " T " << T
            << " n_in " << cs.n_in << (all ? " every expert on the host" : " odd experts on the host");
      }
    }
  }
}

// gemma4's experts: GeGLU with a per-expert output scale (down_scale). Against the CPU; and on the GPU each
// row bit for bit what ffn() gives that expert with out_scale = its scale (routed_ffn's contract).
TEST(CudaOps, RoutedFfnWithDownScaleMatchesTheCpuAndTheGroupedFfn) {
  NEED_GPU();
  const FfnCase c{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::GeGLU, false};
  const int64_t n_in = 512, n_ff = 256, n_out = 256, T = 3;
  const int k = 4, E = 8;
  const auto x = random_floats(static_cast<size_t>(T * n_in), 3);
  const std::vector<int32_t> ids = {7, 0, 3, 5, 1, 1, 6, 2, 4, 0, 7, 3};
  const std::vector<float> scales = {0.5f, 1.0f, 2.0f, 0.75f, -1.5f, 3.0f, 0.125f, 1.25f};
  const auto oc = run_routed(cpu, c, n_in, n_ff, n_out, E, x, T, k, ids, scales);
  const auto og = run_routed(gpu, c, n_in, n_ff, n_out, E, x, T, k, ids, scales);
  EXPECT_LT(rel_l2(og, oc), 2e-4);
  const auto plain = run_routed(gpu, c, n_in, n_ff, n_out, E, x, T, k, ids);
  EXPECT_GT(rel_l2(og, plain), 0.1) << "the scales were not applied";

  UploadedWeights gate = upload(gpu, c.gate, quantized_rows(c.gate, n_in, n_ff * E, 11), n_in, n_ff, E);
  UploadedWeights up = upload(gpu, c.up, quantized_rows(c.up, n_in, n_ff * E, 12), n_in, n_ff, E);
  UploadedWeights down = upload(gpu, c.down, quantized_rows(c.down, n_ff, n_out * E, 13), n_ff, n_out, E);
  std::vector<int32_t> in_rows, out_rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    in_rows.push_back(static_cast<int32_t>(i / k));
    out_rows.push_back(static_cast<int32_t>(i));
  }
  DeviceBuffer dx = put(gpu, x), din = put(gpu, in_rows), dout_rows = put(gpu, out_rows);
  DeviceBuffer out = gpu.alloc_array<float>(ids.size() * n_out, "out");
  std::vector<FfnTask> tasks;
  for (size_t i = 0; i < ids.size(); ++i) {
    FfnTask t;
    t.gate = gate.matrix(ids[i]);
    t.up = up.matrix(ids[i]);
    t.down = down.matrix(ids[i]);
    t.out_scale = scales[static_cast<size_t>(ids[i])];
    t.in_rows = din.as<const int32_t>().sub(i, 1);
    t.out_rows = dout_rows.as<const int32_t>().sub(i, 1);
    t.n_rows = 1;
    tasks.push_back(t);
  }
  gpu.ffn(tasks, ActivationParams{Activation::GeGLU}, dx.as<const float>(), T, out.as<float>());
  EXPECT_EQ(get<float>(gpu, out, ids.size() * n_out), og);
}

TEST(CudaOps, GetRowsDequantizesEveryTableTypeExactly) {
  NEED_GPU();
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,   GgmlType::BF16, GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q8_0,  GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::Q8_K, GgmlType::Q8_1};
  const int64_t n_in = 512, n_rows = 9;
  const std::vector<int32_t> ids = {3, 0, 8, 3};
  for (GgmlType t : types) {
    const auto wb = quantized_rows(t, n_in, n_rows, 31);
    std::vector<float> res[2];
    int i = 0;
    for (Backend* b : {&cpu, &gpu}) {
      UploadedWeights w = upload(*b, t, wb, n_in, n_rows, 1, true);
      DeviceBuffer did = put(*b, ids);
      DeviceBuffer out = b->alloc_array<float>(ids.size() * n_in, "rows");
      b->get_rows(w.first, did.as<const int32_t>(), static_cast<int64_t>(ids.size()), out.as<float>());
      res[i++] = get<float>(*b, out, ids.size() * n_in);
    }
    EXPECT_EQ(res[1], res[0]) << ggml_type_name(t);
  }
  // An id out of range is found on the device and reported at the next synchronisation.
  UploadedWeights w = upload(gpu, GgmlType::F32, quantized_rows(GgmlType::F32, 32, 4, 1), 32, 4, 1, true);
  DeviceBuffer bad = put(gpu, std::vector<int32_t>{7});
  DeviceBuffer out = gpu.alloc_array<float>(32, "rows");
  gpu.get_rows(w.first, bad.as<const int32_t>(), 1, out.as<float>());
  try {
    get<float>(gpu, out, 32);
    ADD_FAILURE() << "an out-of-range id was not reported";
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 is out of range (vocabulary of 4)"), std::string::npos)
        << e.what();
  }
}

TEST(CudaOps, GatherRowsCopiesTheRowsLikeTheCpu) {
  NEED_GPU();
  const int64_t width = 2048, n_rows = 19;
  const auto table = random_floats(static_cast<size_t>(width * n_rows), 8);
  const std::vector<int32_t> ids = {18, 0, 7, 7, 3, 12, 1};
  std::vector<float> res[2];
  int i = 0;
  for (Backend* b : {&cpu, &gpu}) {
    DeviceBuffer dt = put(*b, table), did = put(*b, ids);
    DeviceBuffer out = b->alloc_array<float>(ids.size() * static_cast<size_t>(width), "rows");
    b->gather_rows(dt.as<const float>(), width, did.as<const int32_t>(), static_cast<int64_t>(ids.size()),
                   out.as<float>());
    res[i++] = get<float>(*b, out, ids.size() * static_cast<size_t>(width));
  }
  EXPECT_EQ(res[1], res[0]);
  // A row outside the table is found on the device and reported at the next synchronisation.
  DeviceBuffer dt = put(gpu, table), bad = put(gpu, std::vector<int32_t>{19});
  DeviceBuffer out = gpu.alloc_array<float>(static_cast<size_t>(width), "rows");
  gpu.gather_rows(dt.as<const float>(), width, bad.as<const int32_t>(), 1, out.as<float>());
  EXPECT_THROW(get<float>(gpu, out, static_cast<size_t>(width)), df::Error);
}

template <class F>
std::vector<float> on_both(Backend& cpu, Backend& gpu, F&& f, std::vector<float>* cpu_out) {
  *cpu_out = f(cpu);
  return f(gpu);
}

// RoPE variants 0-3 over heads of head_dim (4 and more: variant 0's): NeoX; normal pairs; YaRN with
// attn_factor; half the dims rotated (the callers add frequency factors there).
RopeParams rope_variant(int variant, int head_dim) {
  RopeParams p;
  p.mode = variant % 2 ? RopeMode::Normal : RopeMode::NeoX;
  p.n_rot = variant == 3 ? head_dim / 2 : head_dim;
  p.freq_base = 1000000.0f;
  if (variant == 2) {
    p.ext_factor = 1.0f;
    p.freq_scale = 0.25f;
    p.n_ctx_orig = 4096;
    p.attn_factor = 1.1f;
  }
  return p;
}

TEST(CudaOps, RmsNormAndRopeMatchTheCpu) {
  NEED_GPU();
  const int64_t rows = 5, n = 384;
  const auto x = random_floats(static_cast<size_t>(rows * n), 41, 2.0f);
  const auto w = random_floats(static_cast<size_t>(n), 42);
  for (bool with_weight : {false, true}) {
    std::vector<float> c;
    const auto g = on_both(
        cpu, gpu,
        [&](Backend& b) {
          DeviceBuffer dx = put(b, x), dw = put(b, w);
          DeviceBuffer dy = b.alloc_array<float>(rows * n, "y");
          b.rms_norm(dx.as<const float>(), rows, n, with_weight ? dw.as<const float>() : Buf<const float>(),
                     1e-5f, dy.as<float>());
          return get<float>(b, dy, rows * n);
        },
        &c);
    EXPECT_LT(rel_l2(g, c), 1e-6);
  }
  const int n_head = 3, head_dim = 128;
  const auto q = random_floats(static_cast<size_t>(rows * n_head * head_dim), 43);
  const std::vector<int32_t> pos = {0, 1, 17, 500, 40000};
  const auto ff = std::vector<float>(64, 1.0f);
  for (int variant = 0; variant < 4; ++variant) {
    const RopeParams p = rope_variant(variant, head_dim);
    std::vector<float> c;
    const auto g = on_both(
        cpu, gpu,
        [&](Backend& b) {
          DeviceBuffer dq = put(b, q), dp = put(b, pos);
          std::vector<float> factors(static_cast<size_t>(p.n_rot / 2));
          for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.05f * static_cast<float>(i);
          DeviceBuffer dff = put(b, factors);
          RopeParams pp = p;
          if (variant == 3) pp.freq_factors = dff.as<const float>();
          b.rope(dq.as<float>(), rows, n_head, head_dim, dp.as<const int32_t>(), pp);
          return get<float>(b, dq, q.size());
        },
        &c);
    EXPECT_LT(rel_l2(g, c), 1e-5) << "variant " << variant;
  }
}

// norm_rope on the GPU (one launch for the per-head norms and RoPE of Q and K): each tensor the bits of the
// GPU's rms_norm then rope, over head sizes (not all a multiple of 32), partial rotation, NeoX and normal
// pairs, YaRN and frequency factors, with and without norm weights, one or two tensors, decode and prompt
// rows; and within the CPU's tolerance of the CPU's norm_rope.
TEST(CudaOps, NormRopeIsRmsNormThenRopeBitForBit) {
  NEED_GPU();
  const std::vector<int32_t> pos_all = {0, 1, 17, 500, 40000, 3, 9, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21};
  for (const int hd : {64, 128, 40, 256}) {
    for (int variant = 0; variant < 5; ++variant) {
      for (const int64_t rows : {1, 3, 17}) {
        const int n_q = 6, n_k = 2;
        const RopeParams p = rope_variant(variant, hd);
        const bool weights = variant != 4, two = variant != 1;
        const auto q = random_floats(static_cast<size_t>(rows * n_q * hd), 201, 3.0f);
        const auto k = random_floats(static_cast<size_t>(rows * n_k * hd), 202, 3.0f);
        const auto qw = random_floats(static_cast<size_t>(hd), 203),
                   kw = random_floats(static_cast<size_t>(hd), 204);
        std::vector<float> factors(static_cast<size_t>(p.n_rot / 2));
        for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.05f * static_cast<float>(i);
        const std::vector<int32_t> pos(pos_all.begin(), pos_all.begin() + rows);
        const std::string what = "hd " + std::to_string(hd) + " variant " + std::to_string(variant) +
                                 " rows " + std::to_string(rows);
        // fused: norm_rope; else rms_norm and rope, tensor by tensor.
        auto run = [&](Backend& b, bool fused) {
          DeviceBuffer dq = put(b, q), dk = put(b, k), dqw = put(b, qw), dkw = put(b, kw), dp = put(b, pos),
                       dff = put(b, factors);
          RopeParams pp = p;
          if (variant == 3) pp.freq_factors = dff.as<const float>();
          const NormRopeTask tasks[] = {
              {dq.as<float>(), n_q, weights ? dqw.as<const float>() : Buf<const float>()},
              {dk.as<float>(), n_k, weights ? dkw.as<const float>() : Buf<const float>()}};
          const std::span<const NormRopeTask> used(tasks, two ? 2 : 1);
          if (fused) {
            b.norm_rope(used, rows, hd, 1e-6f, dp.as<const int32_t>(), pp);
          } else {
            for (const NormRopeTask& t : used) {
              b.rms_norm(t.x, rows * t.n_head, hd, t.weight, 1e-6f, t.x);
              b.rope(t.x, rows, t.n_head, hd, dp.as<const int32_t>(), pp);
            }
          }
          auto out = get<float>(b, dq, q.size());
          const auto outk = get<float>(b, dk, k.size());
          out.insert(out.end(), outk.begin(), outk.end());
          return out;
        };
        const auto fused = run(gpu, true), apart = run(gpu, false), on_cpu = run(cpu, true);
        EXPECT_EQ(fused, apart) << what;
        EXPECT_LT(rel_l2(fused, on_cpu), 1e-5) << what;
        if (!two) {
          EXPECT_EQ(std::vector<float>(fused.begin() + static_cast<std::ptrdiff_t>(q.size()), fused.end()), k)
              << what << ": the second tensor was not given";
        }
      }
    }
  }
#if defined(DF_HAVE_CUDA)
  EXPECT_TRUE(cuda::norm_rope_shape(256, 256, 2));  // the shapes above take the one-launch kernel
  EXPECT_FALSE(cuda::norm_rope_shape(1024, 1024, 2));
#endif
}

TEST(CudaOps, KvStoreAndAttentionMatchTheCpu) {
  NEED_GPU();
  const int n_ctx = 40, n_head = 4, n_head_kv = 2, head_dim = 64;
  const int64_t kv_row = n_head_kv * head_dim;
  const auto k = random_floats(static_cast<size_t>(n_ctx * kv_row), 51);
  const auto v = random_floats(static_cast<size_t>(n_ctx * kv_row), 52);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (int variant = 0; variant < 3; ++variant) {
    AttentionParams p;
    p.n_head = n_head;
    p.scale = 0.125f;
    if (variant == 1) p.window = 7;
    if (variant == 2) p.softcap = 30.0f;
    const int pos0 = 29;
    const int64_t rows = 6;  // a prompt chunk that ends 5 positions before the context does
    const auto q = random_floats(static_cast<size_t>(rows * n_head * head_dim), 53);
    std::vector<uint16_t> caches[2];
    std::vector<float> outs[2];
    int i = 0;
    for (Backend* b : {&cpu, &gpu}) {
      DeviceBuffer kc = b->alloc_array<uint16_t>(n_ctx * kv_row, "k"),
                   vc = b->alloc_array<uint16_t>(n_ctx * kv_row, "v");
      KvCacheView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), n_ctx, n_head_kv, head_dim};
      DeviceBuffer dk = put(*b, k), dv = put(*b, v), dq = put(*b, q), ds = put(*b, sinks);
      b->kv_store(kv, dk.as<const float>(), dv.as<const float>(), pos0 + rows, 0);
      if (variant == 1) p.sinks = ds.as<const float>();
      DeviceBuffer out = b->alloc_array<float>(rows * n_head * head_dim, "out");
      DeviceBuffer scratch = b->alloc_array<float>(b->attention_scratch_floats(n_ctx, head_dim), "scratch");
      b->attention(kv, dq.as<const float>(), rows, pos0, p, out.as<float>(), scratch.as<float>());
      outs[i] = get<float>(*b, out, static_cast<size_t>(rows * n_head * head_dim));
      caches[i] = get<uint16_t>(*b, kc, static_cast<size_t>(n_ctx * kv_row));
      auto vbits = get<uint16_t>(*b, vc, static_cast<size_t>(n_ctx * kv_row));
      caches[i].insert(caches[i].end(), vbits.begin(), vbits.end());
      p.sinks = {};
      ++i;
    }
    EXPECT_EQ(caches[1], caches[0]) << "the f16 cache bits, variant " << variant;
    // P is rounded to f16: an exp one ulp apart can land on the next f16 value, hence 1e-4.
    EXPECT_LT(rel_l2(outs[1], outs[0]), 1e-4) << "variant " << variant;
  }
}

// A prompt's rows (more than a decode batch) take the tiled kernels: against the CPU, and against the same
// rows one at a time through the decode kernel. The scores are the same double sums of exact products in the
// same order and the softmax is the same code; P·V adds exact products in another order, so the two GPU
// paths may differ only where a double sum rounds. Partial tiles (70 rows = 64 + 6; head dims 80 and 256),
// a window, sinks, a softcap, and a chunk that starts inside the context.
TEST(CudaOps, PromptRowsAttentionMatchesTheCpuAndTheDecodeKernel) {
  NEED_GPU();
  struct Shape {
    int n_head, n_kv, hd;
  };
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.25f, 0.75f, 3.0f};
  for (const Shape sh : {Shape{8, 2, 64}, Shape{4, 4, 80}, Shape{4, 1, 256}}) {
    for (int variant = 0; variant < 3; ++variant) {
      const int n_ctx = 128, pos0 = 25;
      const int64_t rows = 70, kv_row = static_cast<int64_t>(sh.n_kv) * sh.hd,
                    hrow = static_cast<int64_t>(sh.n_head) * sh.hd;
      const auto k = random_floats(static_cast<size_t>(n_ctx * kv_row), 71 + variant);
      const auto v = random_floats(static_cast<size_t>(n_ctx * kv_row), 72 + variant);
      const auto q = random_floats(static_cast<size_t>(rows * hrow), 73 + variant);
      AttentionParams p;
      p.n_head = sh.n_head;
      p.scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      if (variant == 1) p.window = 19;
      if (variant == 2) p.softcap = 20.0f;
      std::vector<float> outs[3];
      for (int run = 0; run < 3; ++run) {  // the CPU; the GPU's prompt kernels; the GPU's decode kernel
        Backend& b = run == 0 ? cpu : gpu;
        DeviceBuffer kc = b.alloc_array<uint16_t>(n_ctx * kv_row, "k"),
                     vc = b.alloc_array<uint16_t>(n_ctx * kv_row, "v");
        KvCacheView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), n_ctx, sh.n_kv, sh.hd};
        DeviceBuffer dk = put(b, k), dv = put(b, v), dq = put(b, q), ds = put(b, sinks);
        b.kv_store(kv, dk.as<const float>(), dv.as<const float>(), pos0 + rows, 0);
        if (variant == 1) p.sinks = ds.as<const float>().first(static_cast<size_t>(sh.n_head));
        DeviceBuffer out = b.alloc_array<float>(rows * hrow, "out");
        DeviceBuffer scratch = b.alloc_array<float>(b.attention_scratch_floats(n_ctx, sh.hd), "scratch");
        if (run < 2) {
          b.attention(kv, dq.as<const float>(), rows, pos0, p, out.as<float>(), scratch.as<float>());
        } else {
          for (int64_t r = 0; r < rows; ++r)
            b.attention(kv,
                        dq.as<const float>().sub(static_cast<size_t>(r * hrow), static_cast<size_t>(hrow)), 1,
                        pos0 + static_cast<int>(r), p,
                        out.as<float>().sub(static_cast<size_t>(r * hrow), static_cast<size_t>(hrow)),
                        scratch.as<float>());
        }
        outs[run] = get<float>(b, out, static_cast<size_t>(rows * hrow));
        p.sinks = {};
      }
      const std::string what = "head dim " + std::to_string(sh.hd) + ", variant " + std::to_string(variant);
      EXPECT_LT(rel_l2(outs[1], outs[0]), 1e-4) << what;
      EXPECT_LT(rel_l2(outs[1], outs[2]), 1e-9) << what;
      size_t differ = 0;
      for (size_t i = 0; i < outs[1].size(); ++i) differ += outs[1][i] != outs[2][i];
      EXPECT_LE(differ, outs[1].size() / 1000)
          << what << ": prompt and decode kernels differ in " << differ << " values";
    }
  }
}

// gemma4's per-head shapes: RMS norms over rows of 256 and 512 values with and without a weight (V heads
// have none); NeoX RoPE over whole heads of 256 (θ 1e4) and 512 (θ 1e6, factors 1 on 64 pairs and 1e30 on
// the other 192: those stay unrotated, bit for bit).
TEST(CudaOps, Gemma4HeadDimsRmsNormAndRopeMatchTheCpu) {
  NEED_GPU();
  const int n_head = 16;
  const std::vector<int32_t> pos = {0, 1, 1023, 70000, 262143};
  const int64_t rows = static_cast<int64_t>(pos.size());
  for (const int hd : {256, 512}) {
    const auto x = random_floats(static_cast<size_t>(rows * n_head * hd), 81, 2.0f);
    const auto w = random_floats(static_cast<size_t>(hd), 82);
    for (bool with_weight : {false, true}) {
      std::vector<float> c;
      const auto g = on_both(
          cpu, gpu,
          [&](Backend& b) {
            DeviceBuffer dx = put(b, x), dw = put(b, w);
            DeviceBuffer dy = b.alloc_array<float>(x.size(), "y");
            b.rms_norm(dx.as<const float>(), rows * n_head, hd,
                       with_weight ? dw.as<const float>() : Buf<const float>(), 1e-6f, dy.as<float>());
            return get<float>(b, dy, x.size());
          },
          &c);
      EXPECT_LT(rel_l2(g, c), 1e-6) << "hd " << hd << " weight " << with_weight;
    }
    std::vector<float> factors(static_cast<size_t>(hd / 2), 1.0f);
    if (hd == 512) std::fill(factors.begin() + 64, factors.end(), 1e30f);
    std::vector<float> c;
    const auto g = on_both(
        cpu, gpu,
        [&](Backend& b) {
          DeviceBuffer dq = put(b, x), dp = put(b, pos), dff = put(b, factors);
          RopeParams p;
          p.mode = RopeMode::NeoX;
          p.n_rot = hd;
          p.freq_base = hd == 512 ? 1000000.0f : 10000.0f;
          if (hd == 512) p.freq_factors = dff.as<const float>();
          b.rope(dq.as<float>(), rows, n_head, hd, dp.as<const int32_t>(), p);
          return get<float>(b, dq, x.size());
        },
        &c);
    EXPECT_LT(rel_l2(g, c), 1e-5) << "rope hd " << hd;
    if (hd == 512)
      for (int64_t r = 0; r < rows * n_head; ++r)
        for (int i = 64; i < 256; ++i)
          for (const int d : {i, i + 256}) {
            const size_t at = static_cast<size_t>(r * hd + d);
            ASSERT_EQ(g[at], x[at]) << "row " << r << " dim " << d << " rotated";
          }
  }
}

// gemma4's attention: scale 1.0, 16 query heads over 8 KV heads of 256 dims with a sliding window, and over 2
// KV heads of 512 dims without one.
TEST(CudaOps, Gemma4AttentionShapesMatchTheCpu) {
  NEED_GPU();
  struct Shape {
    int n_kv, hd, window;
  };
  for (const Shape sh : {Shape{8, 256, 7}, Shape{2, 512, 0}}) {
    const int n_ctx = 48, n_head = 16, pos0 = 37;
    const int64_t rows = 5, kv_row = static_cast<int64_t>(sh.n_kv) * sh.hd;
    const auto k = random_floats(static_cast<size_t>(n_ctx * kv_row), 91);
    const auto v = random_floats(static_cast<size_t>(n_ctx * kv_row), 92);
    const auto q = random_floats(static_cast<size_t>(rows * n_head * sh.hd), 93, 0.1f);
    AttentionParams p;
    p.n_head = n_head;
    p.scale = 1.0f;
    p.window = sh.window;
    std::vector<float> outs[2];
    int i = 0;
    for (Backend* b : {&cpu, &gpu}) {
      DeviceBuffer kc = b->alloc_array<uint16_t>(n_ctx * kv_row, "k"),
                   vc = b->alloc_array<uint16_t>(n_ctx * kv_row, "v");
      KvCacheView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), n_ctx, sh.n_kv, sh.hd};
      DeviceBuffer dk = put(*b, k), dv = put(*b, v), dq = put(*b, q);
      b->kv_store(kv, dk.as<const float>(), dv.as<const float>(), pos0 + rows, 0);
      DeviceBuffer out = b->alloc_array<float>(rows * n_head * sh.hd, "out");
      DeviceBuffer scratch = b->alloc_array<float>(b->attention_scratch_floats(n_ctx, sh.hd), "scratch");
      b->attention(kv, dq.as<const float>(), rows, pos0, p, out.as<float>(), scratch.as<float>());
      outs[i++] = get<float>(*b, out, static_cast<size_t>(rows * n_head * sh.hd));
    }
    EXPECT_LT(rel_l2(outs[1], outs[0]), 1e-4) << "head dim " << sh.hd;
  }
}

// route() on backend b: the ids and weights of `rows` rows of logits, with the selection bias `bias` when
// given (uploaded to b).
struct RouteResult {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
RouteResult route_on(Backend& b, RouterParams p, const std::vector<float>& logits, int64_t rows,
                     const std::vector<float>* bias = nullptr) {
  DeviceBuffer dl = put(b, logits);
  DeviceBuffer dsel = bias ? put(b, *bias) : DeviceBuffer{};
  if (bias) p.selection_bias = dsel.as<const float>();
  DeviceBuffer di = b.alloc_array<int32_t>(rows * p.k, "ids"), dw = b.alloc_array<float>(rows * p.k, "w");
  b.route(p, dl.as<const float>(), rows, di.as<int32_t>(), dw.as<float>());
  return {get<int32_t>(b, di, rows * p.k), get<float>(b, dw, rows * p.k)};
}

TEST(CudaOps, RoutingChoosesTheSameExpertsWithTheSameWeights) {
  NEED_GPU();
  const int64_t rows = 7;
  for (int E : {16, 64, 129}) {
    for (Gating g : {Gating::Softmax, Gating::Sigmoid, Gating::SoftmaxWeight}) {
      for (bool bias : {false, true}) {
        const auto logits = random_floats(static_cast<size_t>(rows * E), 61 + E, 2.0f);
        const auto sel = random_floats(static_cast<size_t>(E), 62, 0.01f);
        RouterParams p;
        p.gating = g;
        p.n_expert = E;
        p.k = 4;
        p.scale = 2.5f;
        const std::vector<float>* with = bias && g != Gating::SoftmaxWeight ? &sel : nullptr;
        const RouteResult on_cpu = route_on(cpu, p, logits, rows, with),
                          on_gpu = route_on(gpu, p, logits, rows, with);
        EXPECT_EQ(on_gpu.ids, on_cpu.ids) << "E " << E << " gating " << static_cast<int>(g);
        EXPECT_LT(rel_l2(on_gpu.weights, on_cpu.weights), 1e-5)
            << "E " << E << " gating " << static_cast<int>(g);
      }
    }
  }
}

// The CPU's pick rule on rows made of exact ties, signed zeros, infinities and NaN, for expert counts of one
// to ten experts a lane and k up to 10: the lowest id among equal scores, -0 equal to +0, a NaN score chosen
// only where it is the first expert not yet taken. The weights are not compared (NaN rows make them NaN).
TEST(CudaOps, RoutingBreaksTiesAndMeetsNaNAsTheCpuDoes) {
  NEED_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int E : {16, 40, 64, 256, 300}) {
    for (int k : {1, 4, 8, 10}) {
      const int64_t rows = 7;
      std::vector<float> logits(static_cast<size_t>(rows * E));
      uint32_t seed = 12345u + static_cast<uint32_t>(E * 16 + k);
      const auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
      const float palette[] = {-1.0f, -0.0f, 0.0f, 0.5f, 1.0f, -inf, inf, nan};
      const auto logit = [&](int64_t r, int e) {
        if (r == 0) return 0.25f;                                   // every score equal
        if (r == 1) return palette[next() % 5];                     // ties, signed zeros
        if (r == 2) return e == 0 ? nan : palette[next() % 5];      // NaN first: chosen first
        if (r == 3) return e % 7 == 3 ? nan : palette[next() % 7];  // NaN later, infinities
        if (r == 4) return nan;                                     // nothing but NaN
        if (r == 5) return e < k / 2 ? nan : palette[next() % 8];   // the first few NaN
        return static_cast<float>(next() % 3) - 1.0f;               // three values, many ties
      };
      for (int64_t r = 0; r < rows; ++r)
        for (int e = 0; e < E; ++e) logits[static_cast<size_t>(r * E + e)] = logit(r, e);
      for (Gating g : {Gating::Softmax, Gating::Sigmoid, Gating::SoftmaxWeight}) {
        RouterParams p;
        p.gating = g;
        p.n_expert = E;
        p.k = k;
        EXPECT_EQ(route_on(gpu, p, logits, rows).ids, route_on(cpu, p, logits, rows).ids)
            << "E " << E << " k " << k << " gating " << static_cast<int>(g);
      }
    }
  }
}

// norm_route (one launch on CUDA for decode-sized batches: its blocks count themselves, the last one routes)
// gives the bits of rms_norm, matmul and route called in turn, on every row count, width, expert count and
// gating, called again and again (the count must be back at zero after each launch); and the CPU's choices.
TEST(CudaOps, NormRouteIsTheThreeOpsBitForBit) {
  NEED_GPU();
  struct Case {
    int64_t rows, n;
    int E;
    Gating g;
    bool bias;
  };
  const Case cases[] = {{1, 2048, 64, Gating::Sigmoid, true},        {1, 256, 16, Gating::Softmax, false},
                        {3, 1024, 64, Gating::SoftmaxWeight, false}, {8, 2048, 32, Gating::Softmax, true},
                        {5, 4096, 8, Gating::Sigmoid, false},        {9, 2048, 64, Gating::Sigmoid, true},
                        {2, 4100, 16, Gating::Softmax, false},       {1, 2048, 128, Gating::Softmax, false},
                        {1, 4096, 32, Gating::SoftmaxWeight, true},  {1, 1024, 40, Gating::Sigmoid, false},
                        {2, 1024, 300, Gating::Softmax, true},       {1, 2048, 256, Gating::Sigmoid, true}};
  for (const Case& c : cases) {
    const int k = 4;
    const auto x = random_floats(static_cast<size_t>(c.rows * c.n), 71 + static_cast<uint32_t>(c.n), 1.0f);
    const auto norm = random_floats(static_cast<size_t>(c.n), 72, 1.0f);
    const auto router = random_floats(static_cast<size_t>(c.n) * c.E, 73, 0.05f);
    const auto sel = random_floats(static_cast<size_t>(c.E), 74, 0.01f);
    const std::vector<uint8_t> router_bytes(reinterpret_cast<const uint8_t*>(router.data()),
                                            reinterpret_cast<const uint8_t*>(router.data() + router.size()));
    struct Result {
      std::vector<float> xn, logits, w;
      std::vector<int32_t> ids;
    };
    auto run = [&](Backend& b, bool fused) {
      UploadedWeights w = upload(b, GgmlType::F32, router_bytes, c.n, c.E);
      DeviceBuffer dx = put(b, x), dnorm = put(b, norm), dsel = put(b, sel);
      DeviceBuffer dxn = b.alloc_array<float>(c.rows * c.n, "xn"),
                   dl = b.alloc_array<float>(c.rows * c.E, "l");
      DeviceBuffer di = b.alloc_array<int32_t>(c.rows * k, "ids"), dw = b.alloc_array<float>(c.rows * k, "w");
      DeviceBuffer scratch =
          b.alloc(std::max<size_t>(b.matmul_scratch_bytes(GgmlType::F32, c.n, c.rows), 1), "scratch");
      RouterParams p;
      p.gating = c.g;
      p.n_expert = c.E;
      p.k = k;
      if (c.bias) p.selection_bias = dsel.as<const float>();
      std::vector<Result> out;
      for (int rep = 0; rep < 3; ++rep) {
        if (fused) {
          b.norm_route(p, dx.as<const float>(), c.rows, c.n, dnorm.as<const float>(), 1e-5f, w.first,
                       scratch.as<uint8_t>(), dxn.as<float>(), dl.as<float>(), di.as<int32_t>(),
                       dw.as<float>());
        } else {
          b.rms_norm(dx.as<const float>(), c.rows, c.n, dnorm.as<const float>(), 1e-5f, dxn.as<float>());
          b.matmul(w.first, dxn.as<const float>(), c.rows, dl.as<float>(), scratch.as<uint8_t>());
          b.route(p, dl.as<const float>(), c.rows, di.as<int32_t>(), dw.as<float>());
        }
        out.push_back({get<float>(b, dxn, c.rows * c.n), get<float>(b, dl, c.rows * c.E),
                       get<float>(b, dw, c.rows * k), get<int32_t>(b, di, c.rows * k)});
      }
      return out;
    };
    const auto fused = run(gpu, true), apart = run(gpu, false), on_cpu = run(cpu, true);
    const std::string what = "rows " + std::to_string(c.rows) + " n " + std::to_string(c.n);
    for (int rep = 0; rep < 3; ++rep) {
      EXPECT_EQ(fused[rep].xn, apart[0].xn) << what;
      EXPECT_EQ(fused[rep].logits, apart[0].logits) << what;
      EXPECT_EQ(fused[rep].ids, apart[0].ids) << what;
      EXPECT_EQ(fused[rep].w, apart[0].w) << what;
    }
    EXPECT_EQ(fused[0].ids, on_cpu[0].ids) << what;
    EXPECT_LT(rel_l2(fused[0].logits, on_cpu[0].logits), 1e-5) << what;
    EXPECT_LT(rel_l2(fused[0].w, on_cpu[0].w), 1e-5) << what;
  }
}

#if defined(DF_HAVE_CUDA)
// A producer's rows handed to the op after it as Q8_0 rows (CudaBackend::quantized_output), on one case:
// the consumer's result is bit for bit the one it gives quantizing the floats itself (an unrelated op
// between the two ends the hand-over), eager and in a replayed step graph; the consumer took the rows
// (quantized_rows_taken) where it follows the producer and not otherwise; an op between that rewrites the
// floats is seen (the result is the one of the rewritten floats).
struct HandOver {
  std::function<void()> reset;    // uploads again what the ops change
  std::function<void()> produce;  // writes *floats
  const DeviceBuffer* floats = nullptr;
  int64_t count = 0;                              // floats produced
  std::function<void(Buf<const float>)> consume;  // reads the floats it is given
  std::function<std::vector<float>()> result;     // downloads what the consumer wrote
};
void expect_handed_over_bit_for_bit(Backend& gpu, const HandOver& h, uint64_t graph_key,
                                    const std::string& what) {
  auto& cuda = dynamic_cast<CudaBackend&>(gpu);
  DeviceBuffer other = gpu.alloc_array<float>(4, "other"), ones = put(gpu, std::vector<float>(4, 1.0f));
  // mode 0: the producer, then the consumer; 1: an unrelated op between them; 2: the floats doubled between.
  auto run = [&](int mode, std::optional<uint64_t> key) {
    std::vector<std::vector<float>> outs;
    const uint64_t replayed = gpu.steps_replayed();
    // The same buffers every repetition (new ones would give the recorded graph stale addresses).
    for (int rep = 0; rep < (key ? 4 : 1); ++rep) {
      h.reset();
      const uint64_t taken = cuda.quantized_rows_taken();
      std::optional<StepScope> scope;
      if (key) scope.emplace(gpu, *key);
      h.produce();
      if (mode == 1) gpu.add(other.as<float>(), ones.as<const float>(), 4);
      if (mode == 2) gpu.scale(h.floats->as<float>(), h.count, 2.0f);
      h.consume(h.floats->as<const float>());
      if (scope) scope->end();
      if (!key) {
        EXPECT_EQ(cuda.quantized_rows_taken() - taken, mode == 0 ? 1u : 0u) << what << ": mode " << mode;
      }
      outs.push_back(h.result());
    }
    if (key) {
      EXPECT_GT(gpu.steps_replayed(), replayed) << what << ": the step was never replayed";
    }
    return outs;
  };
  h.reset();
  const auto initial = h.result();
  const auto handed = run(0, std::nullopt), apart = run(1, std::nullopt), doubled = run(2, std::nullopt);
  const auto graphed = run(0, graph_key);
  EXPECT_EQ(handed[0], apart[0]) << what;
  for (const auto& g : graphed) EXPECT_EQ(g, apart[0]) << what << " (graph)";
  EXPECT_GT(rel_l2(handed[0], initial), 1e-3) << what << ": the consumer changed nothing";
  // The doubled floats' result: the consumer on 2 · the floats in a buffer of their own, quantizing them.
  h.reset();
  h.produce();
  auto twice = get<float>(gpu, *h.floats, static_cast<size_t>(h.count));
  for (float& v : twice) v *= 2.0f;
  const DeviceBuffer d2 = put(gpu, twice);
  h.consume(d2.as<const float>());
  EXPECT_EQ(doubled[0], h.result()) << what << " (floats rewritten between)";
}

// The conv's decode rows, quantized by the conv for the product that reads them next (its out_proj).
TEST(CudaOps, ShortConvRowsQuantizedForTheNextProductBitForBit) {
  NEED_GPU();
  const int l_cache = 3;
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    for (const int64_t rows : {1, 3, 8}) {
      const int64_t n = 512, n_out = 96;
      const auto bcx = random_floats(static_cast<size_t>(rows * 3 * n), 171, 2.0f);
      const auto w = random_floats(static_cast<size_t>(n * l_cache), 172);
      const auto st = random_floats(static_cast<size_t>((l_cache - 1) * n), 173);
      const auto residual = random_floats(static_cast<size_t>(rows * n_out), 174);
      UploadedWeights wo = upload(gpu, type, quantized_rows(type, n, n_out, 175), n, n_out);
      DeviceBuffer dbcx = put(gpu, bcx), dw = put(gpu, w), ds = put(gpu, st), acc = put(gpu, residual);
      DeviceBuffer dy = gpu.alloc_array<float>(rows * n, "y"),
                   tmp = gpu.alloc_array<float>(rows * n_out, "tmp");
      DeviceBuffer scratch = gpu.alloc(gpu.matmul_scratch_bytes(type, n, rows) + 16, "scratch");
      HandOver h;
      h.reset = [&] {
        gpu.upload(ds.as<uint8_t>(), st.data(), st.size() * sizeof(float));
        gpu.upload(acc.as<uint8_t>(), residual.data(), residual.size() * sizeof(float));
      };
      h.produce = [&] {
        gpu.short_conv(dbcx.as<const float>(), rows, n, dw.as<const float>(), l_cache, ds.as<float>(),
                       dy.as<float>());
      };
      h.floats = &dy;
      h.count = rows * n;
      h.consume = [&](Buf<const float> y) {
        gpu.matmul_add(wo.first, y, rows, tmp.as<float>(), acc.as<float>(), scratch.as<uint8_t>());
      };
      h.result = [&] { return get<float>(gpu, acc, residual.size()); };
      expect_handed_over_bit_for_bit(
          gpu, h, 0x5c0000u + static_cast<uint64_t>(rows) * 16 + static_cast<uint64_t>(type),
          std::string(ggml_type_name(type)) + " " + std::to_string(rows) + " rows");
    }
  }
}

// Decode attention's rows, quantized by the attention kernel for the wo product that reads them next.
TEST(CudaOps, AttentionRowsQuantizedForTheNextProductBitForBit) {
  NEED_GPU();
  const int n_ctx = 32, n_head = 4, n_head_kv = 2, head_dim = 64, pos0 = 11;
  const int64_t kv_row = n_head_kv * head_dim, hrow = n_head * head_dim, n_out = 80;
  const auto k = random_floats(static_cast<size_t>(n_ctx * kv_row), 181);
  const auto v = random_floats(static_cast<size_t>(n_ctx * kv_row), 182);
  DeviceBuffer kc = gpu.alloc_array<uint16_t>(n_ctx * kv_row, "k"),
               vc = gpu.alloc_array<uint16_t>(n_ctx * kv_row, "v");
  const KvCacheView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), n_ctx, n_head_kv, head_dim};
  DeviceBuffer dk = put(gpu, k), dv = put(gpu, v);
  gpu.kv_store(kv, dk.as<const float>(), dv.as<const float>(), n_ctx, 0);
  DeviceBuffer att_scratch = gpu.alloc_array<float>(gpu.attention_scratch_floats(n_ctx, head_dim), "scratch");
  AttentionParams p;
  p.n_head = n_head;
  p.scale = 0.125f;
  for (const int64_t rows : {1, 3, 8}) {
    const auto q = random_floats(static_cast<size_t>(rows * hrow), 183, 2.0f);
    const auto residual = random_floats(static_cast<size_t>(rows * n_out), 184);
    UploadedWeights wo =
        upload(gpu, GgmlType::Q4_0, quantized_rows(GgmlType::Q4_0, hrow, n_out, 185), hrow, n_out);
    DeviceBuffer dq = put(gpu, q), att = gpu.alloc_array<float>(rows * hrow, "att"), acc = put(gpu, residual);
    DeviceBuffer tmp = gpu.alloc_array<float>(rows * n_out, "tmp");
    DeviceBuffer scratch = gpu.alloc(gpu.matmul_scratch_bytes(GgmlType::Q4_0, hrow, rows) + 16, "scratch");
    HandOver h;
    h.reset = [&] { gpu.upload(acc.as<uint8_t>(), residual.data(), residual.size() * sizeof(float)); };
    h.produce = [&] {
      gpu.attention(kv, dq.as<const float>(), rows, pos0, p, att.as<float>(), att_scratch.as<float>());
    };
    h.floats = &att;
    h.count = rows * hrow;
    h.consume = [&](Buf<const float> a) {
      gpu.matmul_add(wo.first, a, rows, tmp.as<float>(), acc.as<float>(), scratch.as<uint8_t>());
    };
    h.result = [&] { return get<float>(gpu, acc, residual.size()); };
    expect_handed_over_bit_for_bit(gpu, h, 0x5d0000u + static_cast<uint64_t>(rows),
                                   std::to_string(rows) + " rows");
  }
}

// The router's normed decode row, quantized by the one-cluster router (16 · b experts) for the routed gate/up
// that reads it next (routed_ffn_add's combine path): 16 experts on a 4,096-value row (more 32-value groups
// than the quantizing warps, so that they loop) and 64 on a 512-value row.
TEST(CudaOps, NormRouteRowQuantizedForTheRoutedFfnBitForBit) {
  NEED_GPU();
  const int64_t n_ff = 256, n_out = 256;
  const int k = 4;
  const FfnCase c{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, Activation::SwiGLU, false};
  for (const std::pair<int, int64_t>& shape :
       {std::pair<int, int64_t>{16, 4096}, std::pair<int, int64_t>{64, 512}}) {
    const int E = shape.first;
    const int64_t n_in = shape.second;
    const auto x = random_floats(static_cast<size_t>(n_in), 191, 1.0f);
    const auto norm = random_floats(static_cast<size_t>(n_in), 192, 1.0f);
    const auto router = random_floats(static_cast<size_t>(n_in) * E, 193, 0.05f);
    const std::vector<uint8_t> router_bytes(reinterpret_cast<const uint8_t*>(router.data()),
                                            reinterpret_cast<const uint8_t*>(router.data() + router.size()));
    const auto residual = random_floats(static_cast<size_t>(n_out), 194);
    const auto r = routed_setup(gpu, c, n_in, n_ff, n_out, E, x, std::vector<int32_t>(k, 0), {});
    UploadedWeights w = upload(gpu, GgmlType::F32, router_bytes, n_in, E);
    DeviceBuffer dnorm = put(gpu, norm), xn = gpu.alloc_array<float>(n_in, "xn"),
                 logits = gpu.alloc_array<float>(E, "logits"), weights = gpu.alloc_array<float>(k, "weights"),
                 acc = put(gpu, residual), out = gpu.alloc_array<float>(k * n_out, "out");
    DeviceBuffer scratch =
        gpu.alloc(std::max<size_t>(gpu.matmul_scratch_bytes(GgmlType::F32, n_in, 1), 1), "s");
    RouterParams p;
    p.gating = Gating::Softmax;
    p.n_expert = E;
    p.k = k;
    HandOver h;
    h.reset = [&] { gpu.upload(acc.as<uint8_t>(), residual.data(), residual.size() * sizeof(float)); };
    h.produce = [&] {
      gpu.norm_route(p, r->dx.as<const float>(), 1, n_in, dnorm.as<const float>(), 1e-5f, w.first,
                     scratch.as<uint8_t>(), xn.as<float>(), logits.as<float>(), r->did.as<int32_t>(),
                     weights.as<float>());
    };
    h.floats = &xn;
    h.count = n_in;
    h.consume = [&](Buf<const float> v) {
      gpu.routed_ffn_add(r->ex, r->act, r->did.as<const int32_t>(), weights.as<const float>(), 1, k, v,
                         out.as<float>(), acc.as<float>());
    };
    h.result = [&] { return get<float>(gpu, acc, residual.size()); };
    expect_handed_over_bit_for_bit(gpu, h, 0x5e0000u + static_cast<uint64_t>(E),
                                   std::to_string(E) + " experts, rows of " + std::to_string(n_in));
  }
}
#endif  // DF_HAVE_CUDA: the hand-over is the CUDA backend's own

TEST(CudaOps, ShortConvAndElementwiseOpsMatchTheCpu) {
  NEED_GPU();
  const int64_t n = 200;
  const int l_cache = 3;
  std::vector<float> c, g;
  for (const int64_t rows : {1, 5, 20}) {  // decode sizes take one fused launch, prefill chunks two
    const auto bcx = random_floats(static_cast<size_t>(rows * 3 * n), 71);
    const auto w = random_floats(static_cast<size_t>(n * l_cache), 72);
    const auto st = random_floats(static_cast<size_t>((l_cache - 1) * n), 73);
    g = on_both(
        cpu, gpu,
        [&](Backend& b) {
          DeviceBuffer dbcx = put(b, bcx), dw = put(b, w), ds = put(b, st);
          DeviceBuffer dy = b.alloc_array<float>(rows * n, "y");
          b.short_conv(dbcx.as<const float>(), rows, n, dw.as<const float>(), l_cache, ds.as<float>(),
                       dy.as<float>());
          auto y = get<float>(b, dy, rows * n);
          auto s = get<float>(b, ds, st.size());
          y.insert(y.end(), s.begin(), s.end());
          return y;
        },
        &c);
    EXPECT_EQ(g, c) << rows << " rows";  // the CPU's float operations in the CPU's order
  }

  const auto a = random_floats(1000, 74), bb = random_floats(1000, 75), bias = random_floats(100, 76);
  g = on_both(
      cpu, gpu,
      [&](Backend& b) {
        DeviceBuffer da = put(b, a), db = put(b, bb), dbias = put(b, bias);
        DeviceBuffer y = b.alloc_array<float>(1000, "y");
        b.swiglu(da.as<const float>(), db.as<const float>(), 1000, y.as<float>());
        b.add(y.as<float>(), da.as<const float>(), 1000);
        b.add_bias_rows(y.as<float>(), dbias.as<const float>(), 10, 100);
        return get<float>(b, y, 1000);
      },
      &c);
  EXPECT_LT(rel_l2(g, c), 1e-6);

  const int k = 4;
  const int64_t rows = 5;
  const auto eo = random_floats(static_cast<size_t>(rows * k * n), 77),
             ew = random_floats(static_cast<size_t>(rows * k), 78);
  g = on_both(
      cpu, gpu,
      [&](Backend& b) {
        DeviceBuffer de = put(b, eo), dw2 = put(b, ew);
        DeviceBuffer out = put(b, random_floats(static_cast<size_t>(rows * n), 79));  // the residual
        b.moe_combine_add(de.as<const float>(), dw2.as<const float>(), rows, k, n, out.as<float>());
        return get<float>(b, out, rows * n);
      },
      &c);
  EXPECT_EQ(g, c);  // the same float operations in the same order
}

// gemma4's scalings and logit softcap: scale and mul_rows are one float product each (the same bits as the
// CPU); softcap uses CUDA's tanhf (within 2 ulp of glibc's), so a few ulp of the cap apart at most. In a step
// graph (captured on the second run of the key, replayed on the third) they give the eager bits; a replay
// with another scale is refused (the value is part of the step's signature).
TEST(CudaOps, ScaleMulRowsAndSoftcapMatchTheCpuAndReplayInAStepGraph) {
  NEED_GPU();
  const int64_t rows = 7, n = 2816, V = 262144;
  const auto x = random_floats(static_cast<size_t>(rows * n), 101, 3.0f), w = random_floats(n, 102);
  const auto logits = random_floats(static_cast<size_t>(V), 103, 40.0f);
  const float s = 1.0f / std::sqrt(2816.0f), cap = 30.0f;
  std::vector<float> c, c2;
  const auto g = on_both(
      cpu, gpu,
      [&](Backend& b) {
        DeviceBuffer dx = put(b, x), dw = put(b, w);
        b.scale(dx.as<float>(), rows * n, s);
        b.mul_rows(dx.as<float>(), dw.as<const float>(), rows, n);
        return get<float>(b, dx, x.size());
      },
      &c);
  EXPECT_EQ(g, c);
  const auto g2 = on_both(
      cpu, gpu,
      [&](Backend& b) {
        DeviceBuffer dl = put(b, logits);
        b.softcap(dl.as<float>(), V, cap);
        return get<float>(b, dl, logits.size());
      },
      &c2);
  for (size_t i = 0; i < g2.size(); ++i)
    ASSERT_LE(std::abs(g2[i] - c2[i]), 4 * cap * std::numeric_limits<float>::epsilon()) << i;

  DeviceBuffer dx = gpu.alloc_array<float>(x.size(), "x"), dw = put(gpu, w);
  DeviceBuffer dl = gpu.alloc_array<float>(logits.size(), "logits");
  const auto step = [&](float by) {
    gpu.upload<float>(dx.as<float>(), x.data(), x.size());
    gpu.upload<float>(dl.as<float>(), logits.data(), logits.size());
    StepScope scope(gpu, 0x9e4);
    gpu.scale(dx.as<float>(), rows * n, by);
    gpu.mul_rows(dx.as<float>(), dw.as<const float>(), rows, n);
    gpu.softcap(dl.as<float>(), V, cap);
    scope.end();
    return std::make_pair(get<float>(gpu, dx, x.size()), get<float>(gpu, dl, logits.size()));
  };
  const uint64_t replayed = gpu.steps_replayed();
  for (int run = 0; run < 3; ++run) {
    const auto [gx, gl] = step(s);
    EXPECT_EQ(gx, g) << "run " << run;
    EXPECT_EQ(gl, g2) << "run " << run;
  }
  EXPECT_GT(gpu.steps_replayed(), replayed) << "the step was never replayed";
  EXPECT_THROW(step(2.0f * s), df::Error);
}

// ---- qwen35moe's gated delta-net ops.

// Whether every a[i] is within `ulps` units in the last place of b[i] (relative to the larger magnitude).
::testing::AssertionResult within_ulps(const std::vector<float>& a, const std::vector<float>& b, float ulps) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " values vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const float tol = ulps * std::numeric_limits<float>::epsilon() * std::max(std::abs(a[i]), std::abs(b[i]));
    if (!(std::abs(a[i] - b[i]) <= tol))
      return ::testing::AssertionFailure() << "value " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// Whether every a[i] is within rel · max|b| of b[i]: the recurrences' float sums come in another order on the
// GPU, so an element's error is a fraction of the values' scale, not of the element itself.
::testing::AssertionResult within_scale(const std::vector<float>& a, const std::vector<float>& b,
                                        double rel) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " values vs " << b.size();
  double scale = 0.0;
  for (float x : b) scale = std::max(scale, static_cast<double>(std::abs(x)));
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(static_cast<double>(a[i]) - b[i]) <= rel * scale))
      return ::testing::AssertionFailure()
             << "value " << i << ": " << a[i] << " vs " << b[i] << " (scale " << scale << ")";
  return ::testing::AssertionSuccess();
}

// The conv over `rows` tokens in calls of `splits` rows each (summing to rows): the outputs of every call,
// then the final state.
std::vector<float> run_delta_net_conv(Backend& b, const std::vector<float>& u, int64_t rows, int64_t channels,
                                      const std::vector<float>& w, int taps, const std::vector<float>& state,
                                      const std::vector<int64_t>& splits) {
  DeviceBuffer du = put(b, u), dw = put(b, w), ds = put(b, state);
  DeviceBuffer dy = b.alloc_array<float>(static_cast<size_t>(rows * channels), "y");
  int64_t r0 = 0;
  for (int64_t n : splits) {
    const auto part = [&](const DeviceBuffer& buf) {
      return buf.as<float>().sub(static_cast<size_t>(r0 * channels), static_cast<size_t>(n * channels));
    };
    b.delta_net_conv(part(du), n, channels, dw.as<const float>(), taps, ds.as<float>(), part(dy));
    r0 += n;
  }
  auto y = get<float>(b, dy, static_cast<size_t>(rows * channels));
  const auto s = get<float>(b, ds, state.size());
  y.insert(y.end(), s.begin(), s.end());
  return y;
}

// The conv sums are the CPU's float operations in the CPU's order; only SiLU's expf (CUDA's, within 2 ulp)
// differs. The state is raw inputs, copied bit for bit. Two calls continue where one would.
TEST(CudaOps, DeltaNetConvMatchesTheCpu) {
  NEED_GPU();
  for (int taps : {2, 3, 4}) {
    for (int64_t channels : {int64_t{40}, int64_t{1000}}) {
      for (int64_t rows : {1, 37}) {
        const std::string what = std::to_string(taps) + " taps, " + std::to_string(channels) + " channels, " +
                                 std::to_string(rows) + " rows";
        const auto seed = static_cast<uint32_t>(taps * 1000 + channels + rows);
        const auto u = random_floats(static_cast<size_t>(rows * channels), seed, 2.0f);
        const auto w = random_floats(static_cast<size_t>(channels * taps), seed + 1, 0.5f);
        const auto st = random_floats(static_cast<size_t>((taps - 1) * channels), seed + 2, 2.0f);
        std::vector<float> c;
        const auto g = on_both(
            cpu, gpu,
            [&](Backend& b) { return run_delta_net_conv(b, u, rows, channels, w, taps, st, {rows}); }, &c);
        const size_t n_out = static_cast<size_t>(rows * channels);
        EXPECT_TRUE(within_ulps({g.begin(), g.begin() + n_out}, {c.begin(), c.begin() + n_out}, 8)) << what;
        EXPECT_EQ(std::vector<float>(g.begin() + n_out, g.end()),
                  std::vector<float>(c.begin() + n_out, c.end()))
            << what << ": the state";
        // Fewer rows than taps in the first call: the state then mixes old state and new rows.
        if (rows > 1) {
          EXPECT_EQ(run_delta_net_conv(gpu, u, rows, channels, w, taps, st, {1, rows - 1}), g) << what;
          EXPECT_EQ(run_delta_net_conv(gpu, u, rows, channels, w, taps, st, {20, rows - 20}), g) << what;
        }
      }
    }
  }
}

using test::DeltaNetInputs;

// Inputs in a trained model's ranges (delta_net_reference.h) for these shapes.
DeltaNetInputs delta_net_inputs(const DeltaNetParams& p, int64_t rows, uint32_t seed,
                                float alpha_shift = 0.0f) {
  return test::delta_net_inputs({p.n_k_heads, p.n_v_heads, p.head_dim, p.eps}, rows, seed, alpha_shift);
}

// The delta rule over `rows` tokens in calls of `splits` rows each: the outputs, then the final state.
std::vector<float> run_gated_delta_net(Backend& b, DeltaNetParams p, const DeltaNetInputs& in, int64_t rows,
                                       const std::vector<int64_t>& splits) {
  const int64_t nv = p.n_v_heads, d = p.head_dim, C = (2 * p.n_k_heads + nv) * d;
  DeviceBuffer dqkv = put(b, in.qkv), da = put(b, in.alpha), db = put(b, in.beta);
  DeviceBuffer ddt = put(b, in.dt_bias), dssm = put(b, in.ssm_a), ds = put(b, in.state);
  DeviceBuffer dout = b.alloc_array<float>(static_cast<size_t>(rows * nv * d), "out");
  p.dt_bias = ddt.as<const float>();
  p.ssm_a = dssm.as<const float>();
  int64_t r0 = 0;
  for (int64_t n : splits) {
    const auto part = [&](const DeviceBuffer& buf, int64_t width) {
      return buf.as<float>().sub(static_cast<size_t>(r0 * width), static_cast<size_t>(n * width));
    };
    b.gated_delta_net(p, part(dqkv, C), part(da, nv), part(db, nv), n, ds.as<float>(), part(dout, nv * d));
    r0 += n;
  }
  auto out = get<float>(b, dout, static_cast<size_t>(rows * nv * d));
  const auto s = get<float>(b, ds, in.state.size());
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// The GPU's sums over the key dims run in another order (warp reductions; past 8 rows, the chunked form):
// within float rounding of the values' scale, outputs and final state alike, over a hundred tokens of
// realistic decays.
TEST(CudaOps, GatedDeltaNetMatchesTheCpu) {
  NEED_GPU();
  for (const auto& [nk, nv] : {std::pair{2, 4}, std::pair{4, 4}}) {
    for (int d : {16, 32, 64, 128}) {
      for (int64_t rows : {1, 7, 100}) {
        const std::string what = std::to_string(nk) + " k-heads, " + std::to_string(nv) + " v-heads of " +
                                 std::to_string(d) + ", " + std::to_string(rows) + " rows";
        DeltaNetParams p;
        p.n_k_heads = nk;
        p.n_v_heads = nv;
        p.head_dim = d;
        p.eps = 1e-6f;
        const auto in = delta_net_inputs(p, rows, static_cast<uint32_t>(d * 1000 + rows + nk));
        std::vector<float> c;
        const auto g = on_both(
            cpu, gpu, [&](Backend& b) { return run_gated_delta_net(b, p, in, rows, {rows}); }, &c);
        const size_t n_out = static_cast<size_t>(rows * nv * d);
        const std::vector<float> g_out(g.begin(), g.begin() + n_out), c_out(c.begin(), c.begin() + n_out);
        const std::vector<float> g_state(g.begin() + n_out, g.end()), c_state(c.begin() + n_out, c.end());
        EXPECT_TRUE(within_scale(g_out, c_out, 1e-4)) << what << ": the outputs";
        EXPECT_TRUE(within_scale(g_state, c_state, 1e-4)) << what << ": the state";
        if (rows > 1) {
          const int64_t first = rows / 3;
          const auto two = run_gated_delta_net(gpu, p, in, rows, {first, rows - first});
          EXPECT_TRUE(within_scale({two.begin(), two.begin() + n_out}, c_out, 1e-4))
              << what << " in two calls";
          EXPECT_TRUE(within_scale({two.begin() + n_out, two.end()}, c_state, 1e-4))
              << what << " in two calls: the state";
        }
      }
    }
  }
}

// The largest head the op takes, and a head size that is no multiple of the warp (lanes past d idle).
TEST(CudaOps, GatedDeltaNetOddAndLargestHeadsMatchTheCpu) {
  NEED_GPU();
  for (int d : {48, 512}) {
    DeltaNetParams p;
    p.n_k_heads = 1;
    p.n_v_heads = 2;
    p.head_dim = d;
    p.eps = 1e-6f;
    const int64_t rows = 9;
    const auto in = delta_net_inputs(p, rows, static_cast<uint32_t>(d));
    std::vector<float> c;
    const auto g = on_both(
        cpu, gpu, [&](Backend& b) { return run_gated_delta_net(b, p, in, rows, {rows}); }, &c);
    EXPECT_TRUE(within_scale(g, c, 1e-4)) << "head size " << d;
  }
  DeltaNetParams bad;
  bad.n_k_heads = 1;
  bad.n_v_heads = 1;
  bad.head_dim = 513;
  const auto in = delta_net_inputs(bad, 1, 1);
  EXPECT_THROW(run_gated_delta_net(gpu, bad, in, 1, {1}), df::Error);
}

// Prefill batches (more than the batch-invariant rows) take the chunked form: within float rounding of the
// sequential CPU op over several chunks, in calls that end inside a chunk, at its end or one past it, or that
// start with decode-sized ones (the token walk) and go on chunked; head sizes up to 256 (past what shared
// memory holds, the token walk); decays from near 1 to near 0.
TEST(CudaOps, GatedDeltaNetChunkedPrefillMatchesTheCpu) {
  NEED_GPU();
  const int64_t rows = 200;
  const std::vector<std::vector<int64_t>> splits = {{rows}, {9, 191}, {64, 1, 135}, {5, 65, 130}};
  for (int d : {16, 32, 64, 128, 256, 512}) {
    for (float alpha_shift : {0.0f, -12.0f, 12.0f}) {
      if (alpha_shift != 0.0f && d != 128) continue;
      DeltaNetParams p;
      p.n_k_heads = 2;
      p.n_v_heads = 4;
      p.head_dim = d;
      p.eps = 1e-6f;
      const auto in = delta_net_inputs(p, rows, static_cast<uint32_t>(500 + d), alpha_shift);
      const size_t n_out = static_cast<size_t>(rows * p.n_v_heads * d);
      const auto c = run_gated_delta_net(cpu, p, in, rows, {rows});
      const std::vector<float> c_out(c.begin(), c.begin() + n_out), c_state(c.begin() + n_out, c.end());
      for (const auto& split : splits) {
        const auto g = run_gated_delta_net(gpu, p, in, rows, split);
        const std::string what = "head size " + std::to_string(d) + ", alpha shift " +
                                 std::to_string(alpha_shift) + ", first call " + std::to_string(split[0]) +
                                 " rows";
        EXPECT_TRUE(within_scale({g.begin(), g.begin() + n_out}, c_out, 1e-4)) << what << ": the outputs";
        EXPECT_TRUE(within_scale({g.begin() + n_out, g.end()}, c_state, 1e-4)) << what << ": the state";
      }
    }
  }
}

// ggml_sigmoid then ggml_mul: the CPU's two roundings, with CUDA's expf (within 2 ulp) for glibc's.
TEST(CudaOps, MulSigmoidMatchesTheCpuForBothGateWidths) {
  NEED_GPU();
  const int64_t rows = 5, n = 300;
  const auto x = random_floats(static_cast<size_t>(rows * n), 111, 3.0f);
  for (int64_t gate_n : {int64_t{1}, n}) {
    const auto gate = random_floats(static_cast<size_t>(rows * gate_n), 112, 4.0f);
    std::vector<float> c;
    const auto g = on_both(
        cpu, gpu,
        [&](Backend& b) {
          DeviceBuffer dx = put(b, x), dg = put(b, gate);
          b.mul_sigmoid(dx.as<float>(), dg.as<const float>(), rows, n, gate_n);
          return get<float>(b, dx, x.size());
        },
        &c);
    EXPECT_TRUE(within_ulps(g, c, 4)) << "gate width " << gate_n;
  }
}

// A delta-net layer's ops (conv, delta rule, gate) from the same inputs give the same bits every time: run
// eagerly, captured in a step graph, and replayed.
TEST(CudaOps, DeltaNetOpsAreDeterministicAndReplayInAStepGraph) {
  NEED_GPU();
  DeltaNetParams p;
  p.n_k_heads = 2;
  p.n_v_heads = 4;
  p.head_dim = 64;
  p.eps = 1e-6f;
  const int taps = 4;
  const int64_t nv = p.n_v_heads, d = p.head_dim, C = (2 * p.n_k_heads + nv) * d;
  for (int64_t rows : {1, 40}) {
    const auto in = delta_net_inputs(p, rows, 121);
    const auto u = random_floats(static_cast<size_t>(rows * C), 122);
    const auto w = random_floats(static_cast<size_t>(C * taps), 123, 0.5f);
    const auto conv_state = random_floats(static_cast<size_t>((taps - 1) * C), 124);
    const auto z = random_floats(static_cast<size_t>(rows * nv * d), 125);
    DeviceBuffer du = put(gpu, u), dw = put(gpu, w),
                 dconv = gpu.alloc_array<float>(conv_state.size(), "conv");
    DeviceBuffer dqkv = gpu.alloc_array<float>(static_cast<size_t>(rows * C), "qkv");
    DeviceBuffer da = put(gpu, in.alpha), db = put(gpu, in.beta), ddt = put(gpu, in.dt_bias);
    DeviceBuffer dssm = put(gpu, in.ssm_a), ds = gpu.alloc_array<float>(in.state.size(), "state");
    DeviceBuffer dz = put(gpu, z), dout = gpu.alloc_array<float>(static_cast<size_t>(rows * nv * d), "out");
    DeltaNetParams pp = p;
    pp.dt_bias = ddt.as<const float>();
    pp.ssm_a = dssm.as<const float>();
    const auto step = [&] {
      gpu.upload<float>(dconv.as<float>(), conv_state.data(), conv_state.size());
      gpu.upload<float>(ds.as<float>(), in.state.data(), in.state.size());
      StepScope scope(gpu, 0xd17 + static_cast<uint64_t>(rows));
      gpu.delta_net_conv(du.as<const float>(), rows, C, dw.as<const float>(), taps, dconv.as<float>(),
                         dqkv.as<float>());
      gpu.gated_delta_net(pp, dqkv.as<const float>(), da.as<const float>(), db.as<const float>(), rows,
                          ds.as<float>(), dout.as<float>());
      gpu.mul_sigmoid(dout.as<float>(), dz.as<const float>(), rows, nv * d, nv * d);
      scope.end();
      auto r = get<float>(gpu, dout, static_cast<size_t>(rows * nv * d));
      const auto conv_after = get<float>(gpu, dconv, conv_state.size());
      const auto state_after = get<float>(gpu, ds, in.state.size());
      r.insert(r.end(), conv_after.begin(), conv_after.end());
      r.insert(r.end(), state_after.begin(), state_after.end());
      return r;
    };
    const uint64_t replayed = gpu.steps_replayed();
    const auto first = step();
    for (int run = 1; run < 4; ++run) EXPECT_EQ(step(), first) << rows << " rows, run " << run;
    EXPECT_GT(gpu.steps_replayed(), replayed) << "the step was never replayed";
  }
}

#if defined(DF_HAVE_CUDA)
// The activation quantizer (kernels.h launch_quantize) byte for byte against quant::quantize_activation,
// ggml's reference: the vector kernel (rows 16-byte aligned; 3 blocks a row, so a warp's fourth group of
// lanes has none) and the one-warp-per-block kernel (rows that are not aligned), rows in order and gathered
// through a row map, with a zero block and blocks of very different magnitudes.
TEST(CudaKernels, ActivationQuantizationIsTheReferenceByteForByte) {
  NEED_GPU();
  const int64_t n = 96, rows = 5, nb = n / 32;
  auto x = random_floats(static_cast<size_t>(rows * n + 4), 41);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= static_cast<float>(1 << (i / 32 % 7)) / 8.0f;
  std::fill(x.begin() + n, x.begin() + n + 32, 0.0f);  // row 1, block 0 (aligned case)
  x[3 * n + 40] = 3.0e4f;
  const std::vector<int32_t> row_map = {4, 0, 2, 2, 1};
  for (const GgmlType act : {GgmlType::Q8_0, GgmlType::Q8_1}) {
    for (const int offset : {0, 1}) {
      for (const bool mapped : {false, true}) {
        const size_t stride = cuda::act_row_stride(act, n);
        DeviceBuffer dx = put(gpu, x), dmap = put(gpu, row_map);
        DeviceBuffer dq = gpu.alloc_array<uint8_t>(rows * stride, "q");
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const float* xp = BufferAccess::raw(dx.as<const float>()) + offset;
        cuda::launch_quantize(act, xp, n, mapped ? BufferAccess::raw(dmap.as<const int32_t>()) : nullptr,
                              rows, n, BufferAccess::raw(dq.as<uint8_t>()), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        // As words: Backend::download's byte overload is the untyped one (strides are multiples of 16).
        const auto words = get<uint32_t>(gpu, dq, static_cast<size_t>(rows) * stride / 4);
        std::vector<uint8_t> got(static_cast<size_t>(rows) * stride);
        std::memcpy(got.data(), words.data(), got.size());
        const size_t block_bytes = act == GgmlType::Q8_0 ? 34 : 36;
        std::vector<uint8_t> ref(static_cast<size_t>(nb) * block_bytes);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t src = mapped ? row_map[static_cast<size_t>(r)] : r;
          quant::quantize_activation(act, x.data() + offset + src * n, ref.data(), n);
          const uint8_t* row = got.data() + static_cast<size_t>(r) * stride;
          for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = ref.data() + static_cast<size_t>(b) * block_bytes;
            uint16_t d, sum;
            std::memcpy(&d, blk, 2);
            std::memcpy(&sum, blk + 2, 2);
            const uint8_t* qs = blk + (act == GgmlType::Q8_0 ? 2 : 4);
            const std::string what = std::string(ggml_type_name(act)) + (offset ? " unaligned" : " aligned") +
                                     (mapped ? " mapped" : "") + ", row " + std::to_string(r) + " block " +
                                     std::to_string(b);
            EXPECT_EQ(std::memcmp(row + b * 32, qs, 32), 0) << what;
            float scale, s;
            std::memcpy(&scale, row + n + b * 4, 4);
            EXPECT_EQ(scale, quant::fp16_to_fp32(d)) << what;
            if (act == GgmlType::Q8_1) {
              std::memcpy(&s, row + n + (nb + b) * 4, 4);
              EXPECT_EQ(s, quant::fp16_to_fp32(sum)) << what;
            }
          }
        }
      }
    }
  }
}

// The expert tiers unpack Q4_0x16 records in VRAM: the GPU's bytes are the host's, for rows whose length is
// an odd number of blocks (2-byte aligned rows) and into an output that starts 2 bytes past a 4-byte
// boundary.
TEST(CudaKernels, RecordUnpackIsTheHostsUnpackByteForByte) {
  NEED_GPU();
  std::mt19937 rng(7);
  for (const auto& [n_out, n_in] : std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {48, 96}, {32, 2048}}) {
    const size_t bytes = ggml_row_bytes(GgmlType::Q4_0, n_in) * static_cast<size_t>(n_out);
    std::vector<uint8_t> rows(bytes), packed(bytes);
    for (uint8_t& b : rows) b = static_cast<uint8_t>(rng());
    quant::pack_q4_0x16(rows.data(), n_out, n_in, packed.data());
    std::vector<uint32_t> packed_words(bytes / 4);
    std::memcpy(packed_words.data(), packed.data(), bytes);
    DeviceBuffer dp = put(gpu, packed_words);
    for (const size_t out_offset : {size_t{0}, size_t{2}}) {
      DeviceBuffer dr = gpu.alloc_array<uint16_t>((bytes + out_offset) / 2 + 1, "rows");
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cuda::launch_unpack_q4_0x16(
          reinterpret_cast<const uint8_t*>(BufferAccess::raw(dp.as<const uint32_t>())), n_out, n_in,
          reinterpret_cast<uint8_t*>(BufferAccess::raw(dr.as<uint16_t>())) + out_offset, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto words = get<uint16_t>(gpu, dr, (bytes + out_offset) / 2 + 1);
      std::vector<uint8_t> got(bytes);
      std::memcpy(got.data(), reinterpret_cast<const uint8_t*>(words.data()) + out_offset, bytes);
      EXPECT_EQ(got, rows) << n_out << " x " << n_in << ", output offset " << out_offset;
    }
  }
}
#endif

TEST(CudaOps, TransfersRoundTrip) {
  NEED_GPU();

  std::vector<int32_t> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 7);
  DeviceBuffer a = put(gpu, v);  // larger than a staging slot
  DeviceBuffer b = gpu.alloc_array<int32_t>(v.size(), "b");
  EXPECT_EQ(get<int32_t>(gpu, b, 4), std::vector<int32_t>(4, 0)) << "alloc zeroes";
  gpu.copy<int32_t>(b.as<int32_t>(), a.as<const int32_t>(), v.size());
  EXPECT_EQ(get<int32_t>(gpu, b, v.size()), v);
  gpu.fill_zero(b.as<int32_t>().sub(10, 5));
  auto back = get<int32_t>(gpu, b, 20);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(back[i], i >= 10 && i < 15 ? 0 : i * 7);
  const std::vector<int32_t> small = {1, 2, 3};
  for (int round = 0; round < 20; ++round) gpu.upload<int32_t>(b.as<int32_t>(), small.data(), 3);  // staged
  EXPECT_EQ(get<int32_t>(gpu, b, 3), small);
}

TEST(CudaOps, ArgmaxIsTheScansFirstIndexOfTheGreatestValue) {
  NEED_GPU();
  for (size_t n :
       {size_t{1}, size_t{2}, size_t{31}, size_t{1000}, size_t{4097}, size_t{65536}, size_t{151936}}) {
    const int rows = 9;
    const std::vector<float> x = df::testing::argmax_rows(rows, n, static_cast<uint32_t>(n) + 1);
    DeviceBuffer dx = put(gpu, x);
    DeviceBuffer ids = gpu.alloc_array<int32_t>(rows, "argmax ids");
    gpu.argmax(dx.as<const float>(), rows, static_cast<int64_t>(n), ids.as<int32_t>());
    const std::vector<int32_t> got = get<int32_t>(gpu, ids, rows);
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(got[static_cast<size_t>(r)],
                df::testing::scan_argmax(std::span(x.data() + static_cast<size_t>(r) * n, n)))
          << "row " << r << " of " << n << " values";
  }
}

TEST(CudaOps, ReadBacksQueuedBehindKernelsComeBackFromTheirSlots) {
  NEED_GPU();
  // Each slot reads the argmax of a row that a kernel queued just before wrote: the copy waits for it.
  const size_t n = 65536;
  const std::vector<float> x = df::testing::argmax_rows(Backend::kReadBackSlots, n, 5);
  DeviceBuffer dx = put(gpu, x);
  DeviceBuffer ids = gpu.alloc_array<int32_t>(Backend::kReadBackSlots, "argmax ids");
  for (int slot = 0; slot < Backend::kReadBackSlots; ++slot) {
    const auto row = dx.as<const float>().sub(static_cast<size_t>(slot) * n, n);
    gpu.argmax(row, 1, static_cast<int64_t>(n), ids.as<int32_t>().sub(static_cast<size_t>(slot), 1));
    gpu.queue_read_back(slot, ids.as<const int32_t>().sub(static_cast<size_t>(slot), 1).bytes(),
                        sizeof(int32_t));
  }
  for (int slot = Backend::kReadBackSlots - 1; slot >= 0; --slot) {
    int32_t got = -1;
    gpu.read_back(slot, &got, sizeof got);
    EXPECT_EQ(got, df::testing::scan_argmax(std::span(x.data() + static_cast<size_t>(slot) * n, n))) << slot;
  }
  EXPECT_THROW(gpu.queue_read_back(-1, ids.as<const int32_t>().bytes(), 4), df::Error);
  EXPECT_THROW(gpu.queue_read_back(0, ids.as<const int32_t>().bytes(), Backend::kReadBackBytes + 4),
               df::Error);
}

}  // namespace
}  // namespace df::backend
