#pragma once
// Token sampling as llama.cpp's default chain orders it: repetition (and presence/frequency) penalties →
// top-k → top-p → min-p → temperature → draw. Temperature <= 0 means greedy (argmax, lowest id on a tie). All
// buffers are sized once for the vocabulary: sampling a token allocates nothing.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace df {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;                  // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float presence_penalty = 0.0f;   // 0: off; subtracted once from each recent token's logit (OpenAI's)
  float frequency_penalty = 0.0f;  // 0: off; subtracted per occurrence among the recent tokens
  int repeat_last_n = 64;
  uint64_t seed = 0xD15CF0A3ull;
};

class Sampler {
 public:
  Sampler(int n_vocab, const SamplingParams& params);
  // Picks the next token from raw logits (n_vocab floats) and remembers it for the repetition penalty.
  int32_t sample(std::span<const float> logits);
  // Records a token that entered the context without being sampled (the prompt), for the repetition penalty.
  void accept(int32_t token);
  void reset();
  const SamplingParams& params() const { return params_; }
  // Whether sample() is argmax(logits) whatever it has seen (greedy, no penalties): then the argmax may be
  // taken where the logits are (Session::greedy_start).
  bool plain_greedy() const {
    return params_.temperature <= 0 && params_.repeat_penalty == 1.0f && params_.presence_penalty == 0.0f &&
           params_.frequency_penalty == 0.0f;
  }

  // The first index of the greatest logit (NaNs never chosen, unless the first logit is one: then 0).
  static int32_t argmax(std::span<const float> logits);

  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  // The k greatest logits ordered by logit, then id (what std::partial_sort under that order gives), into
  // out[0..k) with p = 0; 0 < k < logits.size() <= out.size(). `heap` (k floats) is scratch. A few linear
  // passes over the logits instead of a partial sort, which cost ~160 us a token at a vocabulary of 65,536.
  static void top_k(std::span<const float> logits, int k, std::span<Candidate> out, std::span<float> heap);

 private:
  double uniform();

  int n_vocab_;
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
  std::vector<float> top_k_heap_;
  std::vector<float> penalized_;
  std::vector<int32_t> history_;  // ring buffer of the last repeat_last_n tokens
  size_t history_pos_ = 0, history_len_ = 0;
};

}  // namespace df
