#pragma once
// One conversation's state on a model: the tokens already processed, the model state (KV cache and
// recurrent state) and the logits after the last token. prefill() reuses the longest common prefix with what
// is cached. A recurrent (short-conv) state cannot be rewound, so a change before the cached end restarts
// from token 0 — unless keep_prompt_snapshot() is on: then the state at the end of the last prefilled prompt
// is kept, and a new prompt that extends that prompt resumes from it (a chat's next turn re-renders the
// reply, which seldom tokenizes as it was generated, but always starts with the previous turn's prompt).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"

namespace df {

struct SessionStats {
  int tokens_reused = 0;     // of the last prefill: positions taken from the cache
  int tokens_evaluated = 0;  // of the last prefill: positions run through the model
  int restarts = 0;          // prefills that had to start again from token 0
  int snapshot_resumes = 0;  // prefills that resumed from the prompt snapshot
};

class Session {
 public:
  // n_batch: the most tokens one forward pass takes (prefill chunk).
  Session(models::Model& model, int n_ctx, int n_batch);

  // Makes the state hold exactly `tokens` and returns the logits after the last of them.
  std::span<const float> prefill(std::span<const int32_t> tokens, models::ForwardCapture* capture = nullptr);
  // prefill() in steps that a SessionBatch runs (its prompt chunks share forwards with other sessions'
  // tokens): the same checks, prefix reuse and snapshot, then the tokens still to run are kept here. Returns
  // how many (0: the logits are there already). The prefill ends when a batch has run the last of them.
  size_t begin_prefill(std::span<const int32_t> tokens);
  size_t prefill_left() const { return pending_.size() - pending_at_; }
  // Appends one token and returns the logits after it.
  std::span<const float> decode(int32_t token, models::ForwardCapture* capture = nullptr);
  // Greedy decoding queued ahead of the host (generate() with a plain greedy sampler, bench): the argmax of
  // each step's logits is taken on the model's backend and fed to the next step, which is queued before the
  // previous token has come back, so that a GPU does not wait for the host between tokens.
  // greedy_start(token) queues decode(token); each greedy_next(more) first queues, when `more` and the
  // context has room, the step that decodes the token the queued step is computing, then waits for that
  // token and returns it; greedy_finish() waits for a step still queued and ends the run. The ids are those
  // of a loop of decode() and Sampler::argmax, and the state holds tokens() as decode() would leave it; a
  // step queued for a token the caller then stops at has run, so tokens() includes that token. logits() is
  // not meaningful after a greedy run. greedy_ahead(): whether this session takes that path (the model can,
  // and its backend gains by it; set_greedy_ahead(true) forces it where the model can, for tests;
  // DF_GREEDY_AHEAD=0 / 1 in the environment turns it off / on where the model can, for comparisons).
  bool greedy_ahead() const { return greedy_ahead_; }
  void set_greedy_ahead(bool on) { greedy_ahead_ = on && model_.queues_greedy(); }
  void greedy_start(int32_t token);
  int32_t greedy_next(bool more);
  void greedy_finish();
  void reset();  // forgets the sequence and the snapshot
  // Keeps a copy of the state at the end of every prefill (one more state's KV and recurrent memory,
  // allocated here once). For chat.
  void keep_prompt_snapshot();

  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The logits after the last token (what the last prefill() or decode() returned, or a SessionBatch gave);
  // not meaningful while a begun prefill has tokens left.
  std::span<const float> logits() const { return logits_; }
  int n_ctx() const { return n_ctx_; }
  int n_batch() const { return n_batch_; }
  int n_vocab() const { return model_.info().n_vocab; }
  bool context_full() const { return static_cast<int>(tokens_.size()) >= n_ctx_; }
  const SessionStats& stats() const { return stats_; }
  size_t state_bytes() const { return state_->bytes(); }
  models::Model& model() { return model_; }

  // Called after every forward pass with its token count and time (the expert cache's telemetry).
  std::function<void(uint64_t tokens, uint64_t ns)> on_step;
  // Called as prefill() starts, with the length of the prompt the state will hold (--record-routing counts
  // positions from its end).
  std::function<void(int prompt_tokens)> on_prefill;
  // Called when a forward pass failed (after the state was reset): releases what the step held.
  std::function<void()> on_failure;

 private:
  friend class SessionBatch;
  // decode()'s checks of `token`.
  void check_decode(int32_t token) const;
  // begin_prefill(); full_hit_ok: a prompt equal to what is cached returns at once (not with a capture,
  // which must see the forward).
  size_t start_prefill(std::span<const int32_t> tokens, bool full_hit_ok);
  // The next at most n tokens of the begun prefill, and their having run (the snapshot taken after the last).
  std::span<const int32_t> next_chunk(size_t n) const;
  void chunk_done(size_t n);
  void run_forward(std::span<const int32_t> tokens, models::ForwardCapture* capture);
  // A greedy step queued or a token taken failed: the state is unusable (as run_forward's failure).
  [[noreturn]] void greedy_failed();
  void check_no_greedy_run(const char* what) const;

  models::Model& model_;
  std::unique_ptr<models::ModelState> state_;
  std::unique_ptr<models::ModelState> snapshot_;  // keep_prompt_snapshot(): the state after snapshot_tokens_
  std::vector<int32_t> snapshot_tokens_;
  int n_ctx_, n_batch_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> pending_;  // a begun prefill's tokens after the reused prefix; pending_at_ of them ran
  size_t pending_at_ = 0;
  std::vector<float> logits_;
  bool have_logits_ = false;
  SessionStats stats_;
  bool greedy_ahead_ = false;
  // Greedy steps queued whose token has not been taken (0 or 1 between calls; a greedy run is under way
  // while it is 1).
  int greedy_queued_ = 0;
  int greedy_oldest_slot_ = 0;                         // the read-back slot of the oldest of them
  std::chrono::steady_clock::time_point greedy_last_;  // when the last token was taken (on_step's time)
};

// Several sessions of one model advanced in ONE forward (Model::forward_many): each one's next decoded token,
// or the next chunk of its begun prefill. The sessions' rows share every dense op, and each expert chosen by
// several of them is fetched and applied once for all. Each session ends as decode() or prefill() would
// leave it, with the same logits (the model's results do not depend on batching;
// tests/test_models_sequences.cpp). Room for `capacity` sessions is allocated once.
class SessionBatch {
 public:
  // max_rows: the most tokens one forward carries (what the states' batch buffers are planned for).
  SessionBatch(size_t capacity, size_t max_rows);

  // Adds `s` with its next token, checked as decode() checks it. df::Error when the batch is full (sessions
  // or rows) or s is in it already.
  void add_token(Session& s, int32_t token);
  // Adds the next chunk of s's begun prefill: at most max_tokens tokens, and no more than rows_left().
  // Returns how many (0 adds nothing). df::Error when s has no prefill begun or is in the batch already.
  size_t add_prompt_chunk(Session& s, size_t max_tokens);
  size_t size() const { return n_; }
  size_t capacity() const { return entries_.size(); }
  size_t rows() const { return rows_; }
  size_t rows_left() const { return max_rows_ - rows_; }
  bool full() const { return n_ == entries_.size() || rows_ == max_rows_; }
  // Runs the batch (nothing when it is empty) and empties it. If the forward fails, every session of the
  // batch is reset (its sequence is lost, as a failed decode()'s or prefill()'s would be), on_failure is
  // called, and the error is rethrown.
  void run();
  void clear() { n_ = rows_ = 0; }

  // As Session's: after the forward with its token count and time; after a failure.
  std::function<void(uint64_t tokens, uint64_t ns)> on_step;
  std::function<void()> on_failure;

 private:
  struct Entry {
    Session* session = nullptr;
    int32_t token = 0;       // a decode step's token
    size_t prompt_rows = 0;  // a prompt chunk's length (0: a decode step)
  };
  void check_room(const Session& s, size_t rows) const;
  std::vector<Entry> entries_;
  std::vector<models::SequenceStep> steps_;
  size_t n_ = 0, rows_ = 0, max_rows_;
};

}  // namespace df
