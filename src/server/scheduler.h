#pragma once
// The one thread that owns the model (Model::forward is not reentrant). It keeps -np slots, each with its own
// Session (KV and recurrent state, with a prompt snapshot, so a prompt that extends what a slot holds
// reuses it); queued requests take the free slot whose cached tokens share the longest prefix with their
// prompt. Every step advances each active sequence in ONE shared forward (SessionBatch): the next token of
// every slot that decodes, then the next chunk of each new request's prompt in the rows left (up to the
// prefill chunk in all), so the experts that several sequences route to are fetched and applied once for all
// of them and a long prompt does not stall the others' decoding. A cancelled request is stopped at its slot's
// next turn. The forwards stay within the backend's batch_invariant_rows (the CPU: any size; CUDA: 8 decode
// steps a forward, prompts alone in their own chunks), where the model's results do not depend on batching,
// so a sequence's output does not depend on what else runs. A failed forward (an expert read error) fails the
// requests it carried (500) and resets their slots' states; the others, and later requests, go on.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model_source.h"
#include "engine/session.h"
#include "server/job.h"

namespace df::server {

struct SchedulerCounters {
  std::atomic<uint64_t> requests{0};  // finished: answered, failed or cancelled
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> cancelled{0};
  std::atomic<uint64_t> prompt_tokens{0};  // prompt tokens run through the model
  std::atomic<uint64_t> cached_tokens{0};  // prompt tokens taken from a slot's cache
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> prompt_ns{0}, decode_ns{0};  // time the scheduler spent prefilling / decoding
  std::atomic<uint64_t> steps{0};
  // Forwards that carried decode steps, and the decode steps they carried (the mean batch is their ratio),
  // and forwards that carried prompt chunks beside decode steps.
  std::atomic<uint64_t> decode_forwards{0}, decode_sequences{0}, mixed_forwards{0};
  std::atomic<int> queued{0}, busy_slots{0};
  std::atomic<double> recent_tokens_per_second{0};  // generated tokens over the last steps' wall time
};

class Scheduler {
 public:
  // `model` must outlive the scheduler. n_slots sessions of n_ctx positions each are allocated here.
  Scheduler(OpenedModel& model, int n_slots, int n_ctx);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void submit(std::shared_ptr<Job> job);
  // Fails every queued and running request (503) and joins the thread.
  void stop();

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int n_ctx() const { return n_ctx_; }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Slot;
  void loop();
  void admit(std::unique_lock<std::mutex>& lock);
  void step(Slot& slot);
  void start(Slot& slot);
  void sample_and_emit(Slot& slot);
  void add_prompt_chunk(Slot& slot);
  void prompt_finished(Slot& slot);
  void run_batch();
  void run_batch(SessionBatch& batch, std::vector<Slot*>& in_batch);
  void finish(Slot& slot, Outcome o);

  OpenedModel& m_;
  const int n_ctx_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  uint64_t clock_ = 0;  // admission counter: a slot's last use, for least-recently-used choice
  SchedulerCounters counters_;
  // The slots this step's shared forward carries, and that forward.
  std::vector<Slot*> in_batch_;
  std::unique_ptr<SessionBatch> batch_;
  // Whether prompt chunks share the decode steps' forwards; else each runs alone in prompt_batch_ (alone_).
  bool mix_prompts_ = true;
  std::unique_ptr<SessionBatch> prompt_batch_;
  std::vector<Slot*> alone_;
  std::thread thread_;
};

}  // namespace df::server
