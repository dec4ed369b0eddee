// Public entry points of quant.h: validate the request, then dispatch to the block functions of one type.
#include <cstring>

#include "quant/quant.h"
#include "util/error.h"
// Last: it switches off FMA contraction for the rest of the file.
#include "quant/quant_detail.h"

namespace df::quant {
namespace {

using namespace detail;

// Number of blocks of an n-value row of type t; throws for an n the type cannot hold.
int64_t blocks_of(const char* what, GgmlType t, int64_t n) {
  const int64_t block = ggml_traits(t).block_size;
  if (n < 0 || n % block != 0) {
    fail("{}: a {} row needs a multiple of {} values, got {}", what, ggml_type_name(t), block, n);
  }
  return n / block;
}

[[noreturn]] void unsupported(const char* what, GgmlType t) {
  const auto id = static_cast<uint32_t>(t);
  const auto traits = ggml_type_traits(id);
  fail("{}: type {} (id {}) is not supported by the reference quantization", what,
       traits ? traits->name : std::string_view("unknown"), id);
}

template <typename Block>
const Block* as_blocks(const void* p) {
  return static_cast<const Block*>(p);
}
template <typename Block>
Block* as_blocks(void* p) {
  return static_cast<Block*>(p);
}

}  // namespace

bool is_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
    case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!is_supported(t)) unsupported("dequantize_row", t);
  const int64_t nb = blocks_of("dequantize_row", t, n);
  switch (t) {
    case GgmlType::F32:
      std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));  // in place is allowed
      return;
    case GgmlType::F16:
      return dequantize_f16(as_blocks<uint16_t>(src), dst, n);
    case GgmlType::BF16:
      return dequantize_bf16(as_blocks<uint16_t>(src), dst, n);
    case GgmlType::Q4_0:
      return dequantize_q4_0(as_blocks<BlockQ4_0>(src), dst, nb);
    case GgmlType::Q4_1:
      return dequantize_q4_1(as_blocks<BlockQ4_1>(src), dst, nb);
    case GgmlType::Q8_0:
      return dequantize_q8_0(as_blocks<BlockQ8_0>(src), dst, nb);
    case GgmlType::Q8_1:
      return dequantize_q8_1(as_blocks<BlockQ8_1>(src), dst, nb);
    case GgmlType::Q4_K:
      return dequantize_q4_k(as_blocks<BlockQ4_K>(src), dst, nb);
    case GgmlType::Q5_K:
      return dequantize_q5_k(as_blocks<BlockQ5_K>(src), dst, nb);
    case GgmlType::Q6_K:
      return dequantize_q6_k(as_blocks<BlockQ6_K>(src), dst, nb);
    case GgmlType::Q8_K:
      return dequantize_q8_k(as_blocks<BlockQ8_K>(src), dst, nb);
    case GgmlType::MXFP4:
      return dequantize_mxfp4(as_blocks<BlockMXFP4>(src), dst, nb);
    default:
      unsupported("dequantize_row", t);
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  if (!is_supported(t)) unsupported("quantize_row", t);
  const int64_t nb = blocks_of("quantize_row", t, n);
  switch (t) {
    case GgmlType::F32:
      std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));  // in place is allowed
      return;
    case GgmlType::F16:
      return quantize_f16(src, as_blocks<uint16_t>(dst), n);
    case GgmlType::BF16:
      return quantize_bf16(src, as_blocks<uint16_t>(dst), n);
    case GgmlType::Q4_0:
      return quantize_q4_0(src, as_blocks<BlockQ4_0>(dst), nb);
    case GgmlType::Q4_1:
      return quantize_q4_1(src, as_blocks<BlockQ4_1>(dst), nb);
    case GgmlType::Q8_0:
      return quantize_q8_0(src, as_blocks<BlockQ8_0>(dst), nb);
    case GgmlType::Q8_1:
      return quantize_q8_1(src, as_blocks<BlockQ8_1>(dst), nb);
    case GgmlType::Q4_K:
      return quantize_q4_k(src, as_blocks<BlockQ4_K>(dst), nb);
    case GgmlType::Q5_K:
      return quantize_q5_k(src, as_blocks<BlockQ5_K>(dst), nb);
    case GgmlType::Q6_K:
      return quantize_q6_k(src, as_blocks<BlockQ6_K>(dst), nb);
    case GgmlType::Q8_K:
      return quantize_q8_k(src, as_blocks<BlockQ8_K>(dst), nb);
    case GgmlType::MXFP4:
      return quantize_mxfp4(src, as_blocks<BlockMXFP4>(dst), nb);
    default:
      unsupported("quantize_row", t);
  }
}

GgmlType vec_dot_type(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
      return w;
    case GgmlType::Q4_0:
    case GgmlType::MXFP4:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
      return GgmlType::Q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    default:
      unsupported("vec_dot_type (no dot product for this weight type)", w);
  }
}

bool has_vec_dot(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::MXFP4:
    case GgmlType::Q4_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_activation(GgmlType act, const float* src, void* dst, int64_t n) {
  switch (act) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
    case GgmlType::Q8_K:
      // llama.cpp's CPU activation quantizers round exactly as the reference quantizers of these types.
      return quantize_row(act, src, dst, n);
    default:
      unsupported("quantize_activation (not an activation format)", act);
  }
}

float vec_dot(GgmlType w, const void* weight_row, const void* act_row, int64_t n) {
  const GgmlType act = vec_dot_type(w);
  const int64_t nb = blocks_of("vec_dot", w, n);
  blocks_of("vec_dot", act, n);
  switch (w) {
    case GgmlType::F32:
      return dot_f32(as_blocks<float>(weight_row), as_blocks<float>(act_row), n);
    case GgmlType::F16:
      return dot_f16(as_blocks<uint16_t>(weight_row), as_blocks<uint16_t>(act_row), n);
    case GgmlType::BF16:
      return dot_bf16(as_blocks<uint16_t>(weight_row), as_blocks<uint16_t>(act_row), n);
    case GgmlType::Q4_0:
      return dot_q4_0_q8_0(as_blocks<BlockQ4_0>(weight_row), as_blocks<BlockQ8_0>(act_row), nb);
    case GgmlType::Q4_1:
      return dot_q4_1_q8_1(as_blocks<BlockQ4_1>(weight_row), as_blocks<BlockQ8_1>(act_row), nb);
    case GgmlType::Q8_0:
      return dot_q8_0_q8_0(as_blocks<BlockQ8_0>(weight_row), as_blocks<BlockQ8_0>(act_row), nb);
    case GgmlType::MXFP4:
      return dot_mxfp4_q8_0(as_blocks<BlockMXFP4>(weight_row), as_blocks<BlockQ8_0>(act_row), nb);
    case GgmlType::Q4_K:
      return dot_q4_k_q8_k(as_blocks<BlockQ4_K>(weight_row), as_blocks<BlockQ8_K>(act_row), nb);
    case GgmlType::Q5_K:
      return dot_q5_k_q8_k(as_blocks<BlockQ5_K>(weight_row), as_blocks<BlockQ8_K>(act_row), nb);
    case GgmlType::Q6_K:
      return dot_q6_k_q8_k(as_blocks<BlockQ6_K>(weight_row), as_blocks<BlockQ8_K>(act_row), nb);
    default:
      unsupported("vec_dot", w);
  }
}

}  // namespace df::quant
