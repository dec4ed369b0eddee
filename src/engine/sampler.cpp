#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "util/argmax.h"
#include "util/error.h"

namespace df {
namespace {

// The sampler's order of candidates: greater logit first, then lower id.
bool logit_then_id(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

Sampler::Sampler(int n_vocab, const SamplingParams& params)
    : n_vocab_(n_vocab),
      params_(params),
      rng_(params.seed),
      cand_(static_cast<size_t>(n_vocab)),
      top_k_heap_(static_cast<size_t>(std::clamp(params.top_k, 0, std::max(n_vocab, 0)))),
      penalized_(static_cast<size_t>(n_vocab)),
      history_(static_cast<size_t>(std::max(params.repeat_last_n, 0))) {
  if (n_vocab <= 0) fail("sampler: vocabulary size {} must be positive", n_vocab);
  if (params.top_p <= 0) fail("--top-p {} must be in (0, 1]", params.top_p);
  if (params.min_p < 0 || params.min_p > 1) fail("--min-p {} must be in [0, 1]", params.min_p);
  if (params.repeat_penalty <= 0) fail("--repeat-penalty {} must be positive", params.repeat_penalty);
  if (params.repeat_last_n < 0) fail("--repeat-last-n {} must not be negative", params.repeat_last_n);
}

void Sampler::reset() {
  rng_.seed(params_.seed);
  history_pos_ = history_len_ = 0;
}

void Sampler::accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_pos_] = token;
  history_pos_ = (history_pos_ + 1) % history_.size();
  history_len_ = std::min(history_len_ + 1, history_.size());
}

// 53 random bits → [0, 1): the same draw sequence on every platform for a given seed.
double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::argmax(std::span<const float> logits) { return first_argmax(logits); }

void Sampler::top_k(std::span<const float> logits, int k, std::span<Candidate> out, std::span<float> heap) {
  const size_t n = logits.size(), kk = static_cast<size_t>(k);
  if (k <= 0 || kk >= n || out.size() < kk || heap.size() < kk)
    fail("sampler: top-{} of {} logits into {} candidates (internal error)", k, n, out.size());
  // The k-th greatest value (with its repeats) by a min-heap of the k greatest so far; most logits fail the
  // first comparison.
  std::copy(logits.begin(), logits.begin() + k, heap.begin());
  const auto h = heap.first(kk);
  std::make_heap(h.begin(), h.end(), std::greater<float>());
  for (size_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v)) fail("sampler: the logit of token {} is NaN", i);
    if (i < kk || !(v > h.front())) continue;
    std::pop_heap(h.begin(), h.end(), std::greater<float>());
    h.back() = v;
    std::push_heap(h.begin(), h.end(), std::greater<float>());
  }
  const float kth = h.front();
  // Every logit above it, and of those equal to it the lowest ids: the first k in (logit desc, id asc).
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += logits[i] > kth;
  size_t m = 0, ties_left = kk - above;
  for (size_t i = 0; i < n && m < kk; ++i) {
    const float v = logits[i];
    if (v > kth || (v == kth && ties_left > 0 && ties_left--)) out[m++] = {static_cast<int32_t>(i), v, 0.0f};
  }
  std::sort(out.begin(), out.begin() + static_cast<long>(kk), logit_then_id);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (static_cast<int>(logits.size()) != n_vocab_)
    fail("sampler: {} logits given for a vocabulary of {}", logits.size(), n_vocab_);
  std::span<const float> x = logits;
  const bool penalties =
      params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if (penalties && history_len_ > 0) {
    std::copy(logits.begin(), logits.end(), penalized_.begin());
    // As llama.cpp: each distinct recent token once; positive logits divided, negative ones multiplied, then
    // the frequency penalty per occurrence and the presence penalty once.
    for (size_t k = 0; k < history_len_; ++k) {
      int32_t t = history_[k];
      if (t < 0 || t >= n_vocab_) continue;
      bool seen_before = false;
      for (size_t j = 0; j < k; ++j) seen_before |= history_[j] == t;
      if (seen_before) continue;
      size_t count = 0;
      for (size_t j = k; j < history_len_; ++j) count += history_[j] == t;
      float& l = penalized_[static_cast<size_t>(t)];
      if (params_.repeat_penalty != 1.0f) l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
      l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
    x = penalized_;
  }
  int32_t chosen;
  if (params_.temperature <= 0) {
    chosen = argmax(x);
  } else {
    size_t n = x.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
      top_k(x, params_.top_k, cand_, top_k_heap_);
      n = static_cast<size_t>(params_.top_k);
    } else {
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) fail("sampler: the logit of token {} is NaN", i);
        cand_[i] = {static_cast<int32_t>(i), x[i], 0.0f};
      }
      std::sort(cand_.begin(), cand_.begin() + static_cast<long>(n), logit_then_id);
    }
    auto softmax = [&](size_t m, float temp) {
      double sum = 0;
      const float top = cand_[0].logit;
      for (size_t i = 0; i < m; ++i) {
        cand_[i].p = std::exp((cand_[i].logit - top) / temp);
        sum += cand_[i].p;
      }
      for (size_t i = 0; i < m; ++i) cand_[i].p = static_cast<float>(cand_[i].p / sum);
    };
    softmax(n, 1.0f);
    if (params_.top_p < 1.0f) {
      double cum = 0;
      size_t keep = n;
      for (size_t i = 0; i < n; ++i) {
        cum += cand_[i].p;
        if (cum >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      n = std::max<size_t>(keep, 1);
    }
    if (params_.min_p > 0) {
      const float threshold = cand_[0].p * params_.min_p;
      size_t keep = 1;
      while (keep < n && cand_[keep].p >= threshold) ++keep;
      n = keep;
    }
    softmax(n, params_.temperature);
    double r = uniform(), cum = 0;
    chosen = cand_[n - 1].id;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].p;
      if (r < cum) {
        chosen = cand_[i].id;
        break;
      }
    }
  }
  accept(chosen);
  return chosen;
}

}  // namespace df
