#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace df {

Session::Session(models::Model& model, int n_ctx, int n_batch)
    : model_(model), n_ctx_(n_ctx), n_batch_(n_batch) {
  if (n_ctx < 1) fail("context size -c {} must be at least 1", n_ctx);
  if (n_batch < 1) fail("batch size -b {} must be at least 1", n_batch);
  state_ = model.new_state(n_ctx);
  logits_.resize(static_cast<size_t>(model.info().n_vocab));
  tokens_.reserve(static_cast<size_t>(n_ctx));
}

void Session::reset() {
  state_->reset();
  tokens_.clear();
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

std::span<const float> Session::prefill(std::span<const int32_t> tokens, models::ForwardCapture* capture) {
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
  size_t common = 0;
  while (common < tokens.size() && common < tokens_.size() && tokens[common] == tokens_[common]) ++common;
  if (common == tokens.size() && common == tokens_.size() && have_logits_ && capture == nullptr) {
    stats_.tokens_reused = static_cast<int>(common);
    stats_.tokens_evaluated = 0;
    return logits_;
  }
  // The cached sequence must be a prefix of the new one, and at least one token must be evaluated to get
  // logits; else the prompt snapshot, if it is a shorter prefix of the new sequence, or token 0.
  if (common < tokens_.size() || common == tokens.size()) {
    const size_t n_snap = snapshot_tokens_.size();
    if (n_snap > 0 && n_snap < tokens.size() &&
        std::equal(snapshot_tokens_.begin(), snapshot_tokens_.end(), tokens.begin())) {
      state_->copy_sequence_from(*snapshot_);
      tokens_.assign(snapshot_tokens_.begin(), snapshot_tokens_.end());
      have_logits_ = false;
      common = n_snap;
      ++stats_.snapshot_resumes;
    } else {
      if (!tokens_.empty()) ++stats_.restarts;
      state_->reset();
      tokens_.clear();
      have_logits_ = false;
      common = 0;
    }
  }
  stats_.tokens_reused = static_cast<int>(common);
  stats_.tokens_evaluated = static_cast<int>(tokens.size() - common);
  for (size_t at = common; at < tokens.size(); at += static_cast<size_t>(n_batch_)) {
    size_t n = std::min(tokens.size() - at, static_cast<size_t>(n_batch_));
    auto chunk = tokens.subspan(at, n);
    run_forward(chunk, capture);
    tokens_.insert(tokens_.end(), chunk.begin(), chunk.end());
  }
  have_logits_ = true;
  if (snapshot_) {
    snapshot_->copy_sequence_from(*state_);
    snapshot_tokens_.assign(tokens_.begin(), tokens_.end());
  }
  return logits_;
}

void Session::check_decode(int32_t token) const {
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

DecodeBatch::DecodeBatch(size_t capacity) : sessions_(capacity), tokens_(capacity), steps_(capacity) {}

void DecodeBatch::add(Session& s, int32_t token) {
  if (n_ == sessions_.size()) fail("a decode batch holds at most {} sessions", sessions_.size());
  for (size_t i = 0; i < n_; ++i)
    if (sessions_[i] == &s) fail("a session was added twice to one decode batch");
  if (n_ > 0 && &sessions_[0]->model_ != &s.model_)
    fail("a decode batch runs sessions of one model, and this one is of another");
  s.check_decode(token);
  sessions_[n_] = &s;
  tokens_[n_] = token;
  ++n_;
}

void DecodeBatch::run() {
  if (n_ == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n_; ++i) {
    Session& s = *sessions_[i];
    s.have_logits_ = false;
    steps_[i] = {s.state_.get(), std::span<const int32_t>(&tokens_[i], 1), s.logits_, false};
  }
  const size_t n = n_;
  n_ = 0;
  try {
    sessions_[0]->model_.forward_many(std::span<const models::SequenceStep>(steps_.data(), n));
  } catch (...) {
    // The forward may have advanced some states half way: every sequence of the batch starts again.
    for (size_t i = 0; i < n; ++i) sessions_[i]->reset();
    if (on_failure) on_failure();
    throw;
  }
  for (size_t i = 0; i < n; ++i) {
    Session& s = *sessions_[i];
    s.tokens_.push_back(tokens_[i]);
    s.have_logits_ = true;
  }
  if (on_step)
    on_step(n, static_cast<uint64_t>(
                   std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                       .count()));
}

}  // namespace df
