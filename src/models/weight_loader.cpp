#include "models/weight_loader.h"

#include <fmt/format.h>

#include <cstring>

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::models {
namespace {

std::string shape_string(std::initializer_list<int64_t> shape) {
  return fmt::format("{{{}}}", fmt::join(shape, ", "));
}

std::string types_string(std::initializer_list<GgmlType> types) {
  std::vector<std::string_view> names;
  for (GgmlType t : types) names.push_back(ggml_type_name(t));
  return fmt::format("{}", fmt::join(names, " or "));
}

constexpr std::initializer_list<GgmlType> kAllTypes = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
    GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4,
};

}  // namespace

bool WeightLoader::has(std::string_view name) const { return file_.find_tensor(name) != nullptr; }

const std::string& WeightLoader::path() const { return file_.path(); }

std::string WeightLoader::first_present(std::initializer_list<std::string_view> names) const {
  for (auto n : names)
    if (has(n)) return std::string(n);
  return std::string(*names.begin());
}

const gguf::TensorInfo& WeightLoader::check(std::string_view name, std::initializer_list<int64_t> shape,
                                            std::initializer_list<GgmlType> types) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (!t)
    fail("{}: {}: missing tensor '{}' (expected shape {})", file_.path(), arch_, name, shape_string(shape));
  // ggml's trailing dims of 1 are no dims: a 1-D {n} tensor is also the one-row matrix {n, 1}.
  bool same = t->n_dims <= shape.size();
  size_t d = 0;
  for (int64_t ne : shape) {
    same = same && (d < t->n_dims ? t->ne[d] == ne : ne == 1);
    ++d;
  }
  if (!same)
    fail("{}: {}: tensor '{}' has shape {}, expected {}", file_.path(), arch_, name, t->shape_string(),
         shape_string(shape));
  if (types.size() != 0) {
    bool ok = false;
    for (GgmlType ty : types) ok = ok || t->type == ty;
    if (!ok)
      fail("{}: {}: tensor '{}' has type {}, expected {}", file_.path(), arch_, name, ggml_type_name(t->type),
           types_string(types));
  }
  return *t;
}

WeightLoader::WeightLoader(const gguf::File& file, backend::Backend& backend, std::string arch)
    : file_(file), backend_(backend), arch_(std::move(arch)) {
  file_.advise_no_readahead();
}

GgmlType WeightLoader::matmul_type(std::string_view name, std::initializer_list<int64_t> shape) const {
  const gguf::TensorInfo& t = check(name, shape);
  if (!backend_.supports_matmul(t.type)) {
    std::vector<std::string_view> ok;
    for (GgmlType ty : kAllTypes)
      if (backend_.supports_matmul(ty)) ok.push_back(ggml_type_name(ty));
    fail("{}: {}: tensor '{}' has type {}, which the {} backend cannot multiply (supported: {})",
         file_.path(), arch_, name, ggml_type_name(t.type), backend_.name(), fmt::join(ok, ", "));
  }
  return t.type;
}

backend::Weight WeightLoader::upload(std::string_view name, int64_t n_in, int64_t n_out,
                                     bool rows_looked_up) {
  const GgmlType type = matmul_type(name, {n_in, n_out});
  const gguf::TensorInfo& t = *file_.find_tensor(name);
  backend::WeightSource src;
  src.type = type;
  src.read = [&](uint8_t* dst) { file_.read_tensor(t, dst); };
  src.n_in = n_in;
  src.n_out = n_out;
  src.rows_looked_up = rows_looked_up;
  backend::UploadedWeights w = backend_.upload_weights(src);
  file_.drop_cached(t);  // the bytes live in the backend's memory now
  bytes_ += t.nbytes;
  storage_.push_back(std::move(w.memory));
  return w.first;
}

std::pair<backend::Weight, backend::Weight> WeightLoader::matrix_halves(std::string_view name, int64_t n_in,
                                                                        int64_t n_out, int64_t group) {
  const GgmlType type = matmul_type(name, {n_in, n_out});
  if (group < 1 || n_out % (2 * group) != 0)
    fail("{}: {}: tensor '{}' has {} rows, not whole pairs of {}-row groups", file_.path(), arch_, name,
         n_out, group);
  const gguf::TensorInfo& t = *file_.find_tensor(name);
  std::vector<uint8_t> whole(t.nbytes);
  file_.read_tensor(t, whole.data());
  file_.drop_cached(t);
  const size_t row = ggml_row_bytes(type, n_in), group_bytes = row * static_cast<size_t>(group);
  const int64_t n_groups = n_out / group;
  backend::Weight halves[2];
  for (int half = 0; half < 2; ++half) {
    backend::WeightSource src;
    src.type = type;
    src.read = [&](uint8_t* dst) {
      for (int64_t g = half; g < n_groups; g += 2, dst += group_bytes)
        std::memcpy(dst, whole.data() + static_cast<size_t>(g) * group_bytes, group_bytes);
    };
    src.n_in = n_in;
    src.n_out = n_out / 2;
    backend::UploadedWeights w = backend_.upload_weights(src);
    storage_.push_back(std::move(w.memory));
    halves[half] = w.first;
  }
  bytes_ += t.nbytes;
  return {halves[0], halves[1]};
}

backend::Weight WeightLoader::table(std::string_view name, int64_t n_in, int64_t n_out) {
  return upload(name, n_in, n_out, true);
}

backend::Weight WeightLoader::matrix(std::string_view name, int64_t n_in, int64_t n_out) {
  return upload(name, n_in, n_out, false);
}

backend::Buf<const float> WeightLoader::f32(std::string_view name, std::initializer_list<int64_t> shape) {
  const gguf::TensorInfo& t = check(name, shape, {GgmlType::F32});
  std::vector<float> host(t.nbytes / sizeof(float));
  file_.read_tensor(t, host.data());
  file_.drop_cached(t);  // the bytes live in the backend's memory now
  bytes_ += t.nbytes;
  backend::DeviceBuffer& mem = storage_.emplace_back(backend_.alloc(t.nbytes, "model weights"));
  backend_.upload(mem.as<float>(), host.data(), host.size());
  return mem.as<float>();
}

std::vector<int64_t> per_layer_ints(const gguf::File& file, const std::string& key, int n_layer) {
  const gguf::Value& v = file.require(key);
  std::vector<int64_t> out;
  if (v.is_array()) {
    if (v.arr.size() != static_cast<size_t>(n_layer))
      fail("{}: GGUF key '{}' has {} entries, expected one per layer ({})", file.path(), key, v.arr.size(),
           n_layer);
    for (const auto& e : v.arr) out.push_back(e.as_int(key));
  } else {
    out.assign(static_cast<size_t>(n_layer), v.as_int(key));
  }
  for (int64_t x : out)
    if (x < 0) fail("{}: GGUF key '{}' holds a negative value {}", file.path(), key, x);
  return out;
}

int64_t require_int_in(const gguf::File& file, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = file.require_int(key);
  if (v < lo || v > hi) fail("{}: GGUF key '{}' = {} is out of range ({}..{})", file.path(), key, v, lo, hi);
  return v;
}

}  // namespace df::models
