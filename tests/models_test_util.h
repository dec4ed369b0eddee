#pragma once
// Fixtures of the model tests on the golden tiny models (test_models_contract.cpp, _lfm2moe.cpp,
// _qwen3moe.cpp, _gpt_oss.cpp): a heap-allocation counter for the decode path, the model file and its
// teacher-forced prompt, batches run in chunks, a provider that records every call, and copies of the file
// with one edit for the loader's errors.
//
// Include it from exactly one source file per test executable: it replaces the global operator new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "experts/expert_provider.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"
#include "util/error.h"

// Counts heap allocations while `g_counting` is set (all threads), to check the decode path.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
// Out of line so that gcc does not pair the inlined new/delete with malloc/free and warn.
[[gnu::noinline]] void* counted_malloc(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
[[gnu::noinline]] void counted_free(void* p) { std::free(p); }
}  // namespace

void* operator new(size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
// The array and nothrow forms too (std::stable_sort's buffer is a nothrow new): under ASan an unreplaced form
// is its own allocator, and the delete that reaches the free() above would not match it.
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace df::models::test_util {

// Runs `tokens` through a fresh state in forwards of `chunk` tokens; the logits of every row.
inline std::vector<float> run_chunks(Model& m, std::span<const int32_t> tokens, size_t chunk) {
  const size_t V = static_cast<size_t>(m.info().n_vocab);
  auto st = m.new_state(static_cast<int>(tokens.size()));
  std::vector<float> all(tokens.size() * V);
  for (size_t at = 0; at < tokens.size(); at += chunk) {
    const size_t n = std::min(chunk, tokens.size() - at);
    m.forward(*st, tokens.subspan(at, n), std::span<float>(all.data() + at * V, n * V), true);
  }
  EXPECT_EQ(st->n_past, static_cast<int>(tokens.size()));
  return all;
}

// Forwards to a resident provider and records every call.
class RecordingProvider final : public ExpertProvider {
 public:
  // The layout of the default (CPU) backend, which the models of these tests run on.
  RecordingProvider(const gguf::File& f, const ExpertLayout& l)
      : backend_(backend::make_backend(backend::BackendOptions{})), inner_(f, l, *backend_), layout(l) {}
  void prefetch(int layer, std::span<const int32_t> ids) override {
    prefetches.push_back({layer, std::vector<int32_t>(ids.begin(), ids.end())});
  }
  void will_acquire(int layer, std::span<const int32_t> ids) override {
    announced[layer].push_back(std::vector<int32_t>(ids.begin(), ids.end()));
  }
  ExpertView acquire(int layer, int e) override {
    ++acquired[{layer, e}];
    ++outstanding;
    return inner_.acquire(layer, e);
  }
  void release(int layer, int e) override {
    --outstanding;
    inner_.release(layer, e);
  }
  void clear() {
    prefetches.clear();
    announced.clear();
    acquired.clear();
  }

  std::vector<std::pair<int, std::vector<int32_t>>> prefetches;
  std::map<int, std::vector<std::vector<int32_t>>> announced;
  std::map<std::pair<int, int>, int> acquired;
  int outstanding = 0;

 private:
  std::shared_ptr<backend::Backend> backend_;  // holds the experts' memory: it outlives inner_
  ResidentExpertProvider inner_;

 public:
  ExpertLayout layout;
};

// The load error of the file at `path`, or "(loaded without error)".
inline std::string load_error(const std::string& path) {
  try {
    const auto f = gguf::File::open(path);
    load_model(f, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

inline void expect_load_error(const std::string& path, const std::string& what) {
  const std::string err = load_error(path);
  EXPECT_NE(err.find(what), std::string::npos) << err;
}

using MetaEdit = std::function<void(gguf::Writer&)>;
// May change a tensor's spec and bytes; false drops the tensor.
using TensorEdit = std::function<bool(gguf::TensorSpec&, std::vector<uint8_t>&)>;

// TensorEdits for load-error tests: tensor `name` gets another shape or type, its data cut or grown to
// match (the writer checks sizes), every other tensor unchanged.
inline TensorEdit reshaped(std::string name, std::vector<int64_t> ne) {
  return [name = std::move(name), ne = std::move(ne)](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (s.name == name) {
      s.ne = ne;
      bytes.resize(s.nbytes());
    }
    return true;
  };
}
inline TensorEdit retyped(std::string name, GgmlType type) {
  return [name = std::move(name), type](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (s.name == name) {
      s.type = type;
      bytes.resize(s.nbytes());
    }
    return true;
  };
}

// One golden model (<name>.gguf and .json, golden_json.h), opened once per process.
class GoldenModel {
 public:
  // Copies of the file are named <variant_prefix>-<what>.gguf in the test's scratch directory.
  GoldenModel(std::string name, std::string variant_prefix)
      : name_(std::move(name)), variant_prefix_(std::move(variant_prefix)) {}

  const gguf::File& file() const {
    if (!file_) file_ = std::make_unique<gguf::File>(gguf::File::open(testing::golden_path(name_ + ".gguf")));
    return *file_;
  }

  std::vector<int32_t> teacher_forced_tokens() const {
    std::ifstream in(testing::golden_path(name_ + ".json"));
    const auto meta = nlohmann::json::parse(in);
    return meta["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
  }

  // The model with a RecordingProvider (*out) and the given prefetch lookahead.
  std::unique_ptr<Model> load_recording(int lookahead, RecordingProvider** out) const {
    LoadOptions o;
    o.prefetch_lookahead = lookahead;
    o.make_expert_provider = [out](const gguf::File& f, const ExpertLayout& l) {
      auto p = std::make_unique<RecordingProvider>(f, l);
      *out = p.get();
      return p;
    };
    return load_model(file(), o);
  }

  // Copies the model with edits: `meta` may change keys, `tensor` may change or drop tensors, and the key
  // drop_key is left out. Returns the copy's path.
  std::string write_variant(const std::string& what, const MetaEdit& meta, const TensorEdit& tensor,
                            const std::string& drop_key = "") const {
    const gguf::File& src = file();
    gguf::Writer w(src.alignment());
    for (const auto& [k, v] : src.metadata())
      if (k != drop_key) w.set(k, v);
    if (meta) meta(w);
    std::vector<std::vector<uint8_t>> data;
    for (const auto& t : src.tensors()) {
      gguf::TensorSpec spec{t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)};
      std::vector<uint8_t> bytes(t.nbytes);
      src.read_tensor(t, bytes.data());
      if (tensor && !tensor(spec, bytes)) continue;
      w.add_tensor(spec);
      data.push_back(std::move(bytes));
    }
    std::filesystem::create_directories(DF_TEST_TMP);
    const std::string path = std::string(DF_TEST_TMP) + "/" + variant_prefix_ + "-" + what + ".gguf";
    w.write(path, data);
    return path;
  }

 private:
  std::string name_, variant_prefix_;
  mutable std::unique_ptr<gguf::File> file_;
};

// Expert weights of a 9-token prefill that are normalised probabilities of the chosen experts: positive,
// summing to 1, in descending order (the selection order, when nothing but the probabilities selects), k
// distinct ids below n_expert, every MoE layer captured.
inline void expect_normalised_weights_in_selection_order(const GoldenModel& tiny) {
  auto m = load_model(tiny.file(), {});
  const auto tokens = tiny.teacher_forced_tokens();
  const int T = 9, K = m->info().n_expert_used, E = m->info().n_expert;
  auto st = m->new_state(T);
  std::vector<float> logits(static_cast<size_t>(m->info().n_vocab));
  ForwardCapture cap;
  m->forward(*st, std::span<const int32_t>(tokens).first(T), logits, false, &cap);
  ASSERT_EQ(cap.expert_weights.size(), m->info().moe_layers.size() * static_cast<size_t>(T * K));
  for (size_t r = 0; r < cap.expert_weights.size() / static_cast<size_t>(K); ++r) {
    const float* w = cap.expert_weights.data() + r * static_cast<size_t>(K);
    const int32_t* id = cap.expert_ids.data() + r * static_cast<size_t>(K);
    double sum = 0;
    for (int j = 0; j < K; ++j) {
      sum += w[j];
      EXPECT_GT(w[j], 0.0f);
      if (j > 0) {
        EXPECT_GE(w[j - 1], w[j]) << "row " << r;
      }
      EXPECT_TRUE(id[j] >= 0 && id[j] < E);
    }
    EXPECT_EQ(std::set<int32_t>(id, id + K).size(), static_cast<size_t>(K));
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

// The logits of every row and the capture of the first T teacher-forced tokens of `tiny` in one batch,
// through the file at `path` (empty: the tiny model itself), each logit checked finite.
struct ForwardRun {
  std::vector<float> logits;
  ForwardCapture capture;
};
inline ForwardRun forward_teacher_forced(const GoldenModel& tiny, size_t T, const std::string& path = "") {
  const auto file = gguf::File::open(path.empty() ? tiny.file().path() : path);
  auto m = load_model(file, {});
  const auto tokens = tiny.teacher_forced_tokens();
  auto st = m->new_state(static_cast<int>(T));
  ForwardRun r;
  r.logits.resize(T * static_cast<size_t>(m->info().n_vocab));
  m->forward(*st, std::span<const int32_t>(tokens).first(T), r.logits, true, &r.capture);
  for (float x : r.logits) EXPECT_TRUE(std::isfinite(x));
  return r;
}

}  // namespace df::models::test_util
