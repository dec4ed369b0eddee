#pragma once
// Reads a model's dense tensors from a GGUF into RAM, checking each one's presence, shape and type first,
// and reads hyper-parameters that may be stored as a scalar or as a per-layer array. Every failure is a
// df::Error that names the file, the tensor or key, what was expected and what was found.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace df::gguf {
class File;
struct TensorInfo;
}  // namespace df::gguf

namespace df::models {

class WeightLoader {
 public:
  // Each tensor is read once, whole, then its file pages are dropped (gguf::File::drop_cached): readahead is
  // turned off for the file, as it would only bring back pages of tensors already loaded.
  WeightLoader(const gguf::File& file, backend::Backend& backend, std::string arch);

  // The tensor's info after checking its shape (ggml order) and, when `types` is not empty, its type.
  const gguf::TensorInfo& check(std::string_view name, std::initializer_list<int64_t> shape,
                                std::initializer_list<GgmlType> types = {}) const;
  // A {n_in, n_out} matrix of a type the backend can multiply, uploaded to the backend for matmul only, in
  // the layout it reads fastest (Backend::upload_weights).
  backend::Weight matrix(std::string_view name, int64_t n_in, int64_t n_out);
  // A {n_in, n_out} matrix whose rows come in alternating groups of `group` rows, as two matrices of n_out /
  // 2 rows: the even groups, then the odd ones (each uploaded as matrix() uploads).
  std::pair<backend::Weight, backend::Weight> matrix_halves(std::string_view name, int64_t n_in,
                                                            int64_t n_out, int64_t group);
  // The same in ggml's row layout, for a table whose rows are also looked up (token embeddings).
  backend::Weight table(std::string_view name, int64_t n_in, int64_t n_out);
  // An F32 vector or matrix of the given shape, uploaded to the backend.
  backend::Buf<const float> f32(std::string_view name, std::initializer_list<int64_t> shape);
  // The first of the names that exists (for tensors with historical aliases), else the first name.
  std::string first_present(std::initializer_list<std::string_view> names) const;
  bool has(std::string_view name) const;
  const std::string& path() const;  // the file's, for messages
  // A matrix's type after checking that the backend can multiply it (expert tensors are not loaded here).
  GgmlType matmul_type(std::string_view name, std::initializer_list<int64_t> shape) const;

  size_t bytes_loaded() const { return bytes_; }
  std::vector<backend::DeviceBuffer> take_storage() { return std::move(storage_); }

 private:
  backend::Weight upload(std::string_view name, int64_t n_in, int64_t n_out, bool rows_looked_up);
  const gguf::File& file_;
  backend::Backend& backend_;
  std::string arch_;
  std::vector<backend::DeviceBuffer> storage_;
  size_t bytes_ = 0;
};

// `<arch>.<key>` as a per-layer vector: an array must have n_layer entries, a scalar applies to every layer.
std::vector<int64_t> per_layer_ints(const gguf::File& file, const std::string& key, int n_layer);
// A required integer key checked to lie in [lo, hi].
int64_t require_int_in(const gguf::File& file, const std::string& key, int64_t lo, int64_t hi);

}  // namespace df::models
