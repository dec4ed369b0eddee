#pragma once
// Where a CUDA forward pass spends its time, for tuning: with DF_CUDA_PROFILE=1 in the environment each op
// waits for the GPU when it ends and adds its wall time (launch, transfer and kernel) to a per-op, per-shape
// total, printed to stderr when the backend goes. Off (the default) it costs one branch per op.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace df::backend::cuda {

class OpProfile {
 public:
  OpProfile();
  ~OpProfile();
  bool on() const { return on_; }
  void add(const std::string& key, double seconds);

 private:
  bool on_ = false;
  struct Total {
    double seconds = 0;
    uint64_t calls = 0;
  };
  std::map<std::string, Total> totals_;
};

// What a timed call is: the op, and for the products the weight's type name, shape and the row count.
struct OpKey {
  const char* op;
  const char* type = nullptr;
  int64_t n_out = 0, n_in = 0, rows = 0;
  std::string str() const;
};

// Times one op when the profile is on: synchronises `sync` at the end of the scope.
template <class Sync>
class OpTimer {
 public:
  OpTimer(OpProfile& p, Sync sync, const OpKey& key) : p_(p), sync_(sync) {
    if (!p_.on()) return;
    key_ = key.str();
    start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!p_.on()) return;
    sync_();
    p_.add(key_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  OpProfile& p_;
  Sync sync_;
  std::string key_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace df::backend::cuda
