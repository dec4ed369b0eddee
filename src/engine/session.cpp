#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "util/error.h"

namespace df {

Session::Session(models::Model& model, int n_ctx, int n_batch)
    : model_(model), n_ctx_(n_ctx), n_batch_(n_batch) {
  if (n_ctx < 1) fail("context size -c {} must be at least 1", n_ctx);
  if (n_batch < 1) fail("batch size -b {} must be at least 1", n_batch);
  state_ = model.new_state(n_ctx);
  const char* ahead = std::getenv("DF_GREEDY_AHEAD");
  const std::string_view forced = ahead ? ahead : "";
  set_greedy_ahead(forced == "1" || (forced != "0" && model.greedy_runs_ahead()));
  logits_.resize(static_cast<size_t>(model.info().n_vocab));
  tokens_.reserve(static_cast<size_t>(n_ctx));
  pending_.reserve(static_cast<size_t>(n_ctx));
}

void Session::reset() {
  // Wait for a step still queued: the state's memory must not be reset under it. Its token is not wanted.
  for (; greedy_queued_ > 0; --greedy_queued_) {
    try {
      (void)model_.greedy_token(greedy_oldest_slot_);
    } catch (...) {  // the failure that brought us here, or another: the state is reset either way
    }
    greedy_oldest_slot_ = (greedy_oldest_slot_ + 1) % backend::Backend::kReadBackSlots;
  }
  state_->reset();
  tokens_.clear();
  pending_.clear();
  pending_at_ = 0;
  snapshot_tokens_.clear();
  have_logits_ = false;
}

void Session::keep_prompt_snapshot() {
  if (snapshot_) return;
  snapshot_ = model_.new_state(n_ctx_);
  snapshot_tokens_.reserve(static_cast<size_t>(n_ctx_));
}

void Session::run_forward(std::span<const int32_t> tokens, models::ForwardCapture* capture) {
  const auto t0 = std::chrono::steady_clock::now();
  have_logits_ = false;
  try {
    model_.forward(*state_, tokens, logits_, false, capture);
  } catch (...) {
    // A step that failed half way leaves the state unusable: start the sequence again next time.
    reset();
    if (on_failure) on_failure();
    throw;
  }
  if (on_step)
    on_step(tokens.size(), static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                     std::chrono::steady_clock::now() - t0)
                                                     .count()));
}

void Session::check_no_greedy_run(const char* what) const {
  if (greedy_queued_ > 0) fail("internal: {} during a greedy run (greedy_finish() first)", what);
}

void Session::greedy_failed() {
  reset();
  if (on_failure) on_failure();
  throw;
}

void Session::greedy_start(int32_t token) {
  check_no_greedy_run("greedy_start()");
  if (!greedy_ahead_) fail("internal: greedy_start() on a session that does not queue greedy steps");
  if (prefill_left() > 0) fail("a session with a prefill under way cannot decode yet");
  check_decode(token);
  have_logits_ = false;
  greedy_last_ = std::chrono::steady_clock::now();
  try {
    model_.queue_greedy(*state_, token, 0);
  } catch (...) {
    greedy_failed();
  }
  tokens_.push_back(token);
  greedy_queued_ = 1;
  greedy_oldest_slot_ = 0;
}

int32_t Session::greedy_next(bool more) {
  if (greedy_queued_ != 1) fail("internal: greedy_next() without a greedy step queued");
  const int slots = backend::Backend::kReadBackSlots;
  int32_t id = 0;
  bool decoded = false;
  try {
    if (more && !context_full()) {
      model_.queue_greedy(*state_, -1, (greedy_oldest_slot_ + 1) % slots);
      ++greedy_queued_;
      decoded = true;
    }
    id = model_.greedy_token(greedy_oldest_slot_);
  } catch (...) {
    greedy_failed();
  }
  --greedy_queued_;
  greedy_oldest_slot_ = (greedy_oldest_slot_ + 1) % slots;
  if (decoded) tokens_.push_back(id);
  const auto now = std::chrono::steady_clock::now();
  if (on_step)
    on_step(1, static_cast<uint64_t>(
                   std::chrono::duration_cast<std::chrono::nanoseconds>(now - greedy_last_).count()));
  greedy_last_ = now;
  return id;
}

void Session::greedy_finish() {
  if (greedy_queued_ > 0) (void)greedy_next(false);
}

size_t Session::begin_prefill(std::span<const int32_t> tokens) { return start_prefill(tokens, true); }

size_t Session::start_prefill(std::span<const int32_t> tokens, bool full_hit_ok) {
  check_no_greedy_run("a prefill");
  if (tokens.empty()) fail("cannot evaluate an empty prompt");
  if (static_cast<int>(tokens.size()) > n_ctx_)
    fail(
        "the prompt is {} tokens but the context holds {}: raise the context size (-c) or shorten the prompt",
        tokens.size(), n_ctx_);
  const int n_vocab = model_.info().n_vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      fail("prompt token {} at position {} is outside the vocabulary (0..{})", tokens[i], i, n_vocab - 1);

  if (on_prefill) on_prefill(static_cast<int>(tokens.size()));
  pending_.clear();
  pending_at_ = 0;
  size_t common = 0;
  while (common < tokens.size() && common < tokens_.size() && tokens[common] == tokens_[common]) ++common;
  if (common == tokens.size() && common == tokens_.size() && have_logits_ && full_hit_ok) {
    stats_.tokens_reused = static_cast<int>(common);
    stats_.tokens_evaluated = 0;
    return 0;
  }
  // The cached sequence must be a prefix of the new one, and at least one token must be evaluated to get
  // logits; else the prompt snapshot, if it is a shorter prefix of the new sequence, or token 0.
  if (common < tokens_.size() || common == tokens.size()) {
    const size_t n_snap = snapshot_tokens_.size();
    if (n_snap > 0 && n_snap < tokens.size() &&
        std::equal(snapshot_tokens_.begin(), snapshot_tokens_.end(), tokens.begin())) {
      state_->copy_sequence_from(*snapshot_);
      tokens_.assign(snapshot_tokens_.begin(), snapshot_tokens_.end());
      common = n_snap;
      ++stats_.snapshot_resumes;
    } else {
      if (!tokens_.empty()) ++stats_.restarts;
      state_->reset();
      tokens_.clear();
      common = 0;
    }
  }
  have_logits_ = false;
  stats_.tokens_reused = static_cast<int>(common);
  stats_.tokens_evaluated = static_cast<int>(tokens.size() - common);
  pending_.assign(tokens.begin() + static_cast<std::ptrdiff_t>(common), tokens.end());
  return pending_.size();
}

std::span<const int32_t> Session::next_chunk(size_t n) const {
  return std::span<const int32_t>(pending_).subspan(pending_at_, std::min(n, prefill_left()));
}

void Session::chunk_done(size_t n) {
  const auto chunk = next_chunk(n);
  tokens_.insert(tokens_.end(), chunk.begin(), chunk.end());
  pending_at_ += chunk.size();
  if (prefill_left() > 0) return;
  pending_.clear();
  pending_at_ = 0;
  have_logits_ = true;
  if (snapshot_) {
    snapshot_->copy_sequence_from(*state_);
    snapshot_tokens_.assign(tokens_.begin(), tokens_.end());
  }
}

std::span<const float> Session::prefill(std::span<const int32_t> tokens, models::ForwardCapture* capture) {
  start_prefill(tokens, capture == nullptr);
  while (prefill_left() > 0) {
    const auto chunk = next_chunk(static_cast<size_t>(n_batch_));
    run_forward(chunk, capture);
    chunk_done(chunk.size());
  }
  return logits_;
}

void Session::check_decode(int32_t token) const {
  check_no_greedy_run("a decode");
  if (context_full()) fail("the context is full ({} tokens): raise the context size (-c)", n_ctx_);
  if (token < 0 || token >= model_.info().n_vocab) fail("token {} is outside the vocabulary", token);
}

std::span<const float> Session::decode(int32_t token, models::ForwardCapture* capture) {
  check_decode(token);
  const int32_t one[1] = {token};
  run_forward(one, capture);
  tokens_.push_back(token);
  have_logits_ = true;
  return logits_;
}

SessionBatch::SessionBatch(size_t capacity, size_t max_rows)
    : entries_(capacity), steps_(capacity), max_rows_(max_rows) {
  if (capacity < 1 || max_rows < 1) fail("a session batch needs room for at least one session and one token");
}

void SessionBatch::check_room(const Session& s, size_t rows) const {
  if (n_ == entries_.size()) fail("a session batch holds at most {} sessions", entries_.size());
  if (rows > rows_left()) fail("a session batch carries at most {} tokens per forward", max_rows_);
  for (size_t i = 0; i < n_; ++i)
    if (entries_[i].session == &s) fail("a session was added twice to one batch");
  if (n_ > 0 && &entries_[0].session->model_ != &s.model_)
    fail("a session batch runs sessions of one model, and this one is of another");
}

void SessionBatch::add_token(Session& s, int32_t token) {
  check_room(s, 1);
  if (s.prefill_left() > 0) fail("a session with a prefill under way cannot decode yet");
  s.check_decode(token);
  entries_[n_++] = Entry{&s, token, 0};
  ++rows_;
}

size_t SessionBatch::add_prompt_chunk(Session& s, size_t max_tokens) {
  if (s.prefill_left() == 0) fail("a session batch was given a session with no prefill under way");
  const size_t rows = std::min({max_tokens, s.prefill_left(), rows_left()});
  if (rows == 0) return 0;
  check_room(s, rows);
  entries_[n_++] = Entry{&s, 0, rows};
  rows_ += rows;
  return rows;
}

void SessionBatch::run() {
  if (n_ == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n_; ++i) {
    const Entry& e = entries_[i];
    Session& s = *e.session;
    s.have_logits_ = false;
    const auto tokens =
        e.prompt_rows > 0 ? s.next_chunk(e.prompt_rows) : std::span<const int32_t>(&e.token, 1);
    steps_[i] = {s.state_.get(), tokens, s.logits_, false};
  }
  const size_t n = n_, rows = rows_;
  clear();
  try {
    entries_[0].session->model_.forward_many(std::span<const models::SequenceStep>(steps_.data(), n));
  } catch (...) {
    // The forward may have advanced some states half way: every sequence of the batch starts again.
    for (size_t i = 0; i < n; ++i) entries_[i].session->reset();
    if (on_failure) on_failure();
    throw;
  }
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = entries_[i];
    Session& s = *e.session;
    if (e.prompt_rows > 0) {
      s.chunk_done(e.prompt_rows);
    } else {
      s.tokens_.push_back(e.token);
      s.have_logits_ = true;
    }
  }
  if (on_step)
    on_step(rows, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - t0)
                                            .count()));
}

}  // namespace df
