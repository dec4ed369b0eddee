#pragma once
// Where a forward pass spends its time, for tuning a backend: with the backend's variable set in the
// environment (DF_CUDA_PROFILE=1, DF_CPU_PROFILE=1) each op adds its wall time to a per-op, per-shape total,
// printed to stderr when the backend goes. A GPU backend waits for the device at the end of each op (so the
// table shows where time goes in a serialised run, not the speed); the CPU's ops are synchronous anyway and
// also report how busy the pool's threads were during each op (thread-seconds running tasks over
// threads x wall time), which separates waiting and waking from work. Off (the default) it costs one branch
// per op.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace df {

// Thread-seconds of a thread pool, by what the threads were doing while jobs ran: running tasks; between
// a job's posting and a thread's first task of it (waking up, claiming); between a thread's last task and
// the job's end (the tail: waiting for the others); and in jobs where a thread ran no task at all.
struct PoolTimes {
  double busy = 0, start = 0, tail = 0, absent = 0;
  PoolTimes operator-(const PoolTimes& o) const {
    return {busy - o.busy, start - o.start, tail - o.tail, absent - o.absent};
  }
};

class OpProfile {
 public:
  // `env`: the variable that turns it on; `title`: the first line of the table.
  OpProfile(const char* env, const char* title);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  bool on() const { return on_; }
  // pool and threads: zero where the backend has no pool.
  void add(const std::string& key, double seconds, const PoolTimes& pool = {}, int threads = 0);
  // Marks an op's end (seconds on the steady clock), so that the table can say how much of the time from
  // the first op to the last was spent outside the backend's ops (the model's and the engine's own work).
  void mark(double start, double end) {
    if (first_start_ == 0) first_start_ = start;
    last_end_ = end;
  }

 private:
  bool on_ = false;
  std::string title_;
  struct Total {
    double seconds = 0;
    PoolTimes pool;
    double capacity = 0;  // thread-seconds available (threads x wall)
    uint64_t calls = 0;
  };
  std::map<std::string, Total> totals_;
  double first_start_ = 0, last_end_ = 0;
};

// What a timed call is: the op, and for the products the weight's type name, shape and the row count.
struct OpKey {
  const char* op;
  const char* type = nullptr;
  int64_t n_out = 0, n_in = 0, rows = 0;
  std::string str() const;
};

// Times one op when the profile is on. `sync()` runs at the end of the scope (a GPU backend waits for its
// stream there); `pool()` returns the pool's running PoolTimes (zeros where there is none), and `threads`
// is the pool size they are counted over.
template <class Sync, class Busy>
class OpTimer {
 public:
  OpTimer(OpProfile& p, Sync sync, Busy pool, int threads, const OpKey& key)
      : p_(p), sync_(sync), pool_(pool), threads_(threads) {
    if (!p_.on()) return;
    key_ = key.str();
    pool0_ = pool_();
    start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!p_.on()) return;
    sync_();
    const auto end = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(end - start_).count();
    p_.add(key_, wall, pool_() - pool0_, threads_);
    p_.mark(std::chrono::duration<double>(start_.time_since_epoch()).count(),
            std::chrono::duration<double>(end.time_since_epoch()).count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  OpProfile& p_;
  Sync sync_;
  Busy pool_;
  int threads_;
  std::string key_;
  PoolTimes pool0_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace df
