// Comparing one run's raw dumps with another's: routing gaps, the teacher-forced batches, logit statistics.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "llama.h"

namespace golden_maker {

// The routing gap of one (token, MoE layer): the smallest score among the chosen experts minus the largest
// among the others (masked experts, -inf, never count as the best unchosen). Computed in double, where the
// difference of two float32 scores is exact, and rounded to float32 only when written: that is how the
// shipped fixtures computed it (their gap changes match this bit for bit, a float32 subtraction does not).
double routing_gap(const float* scores, int n_expert, const int32_t* chosen, int k);

struct TfData {  // one teacher-forced batch of one run
  int T = 0, V = 0, E = 0, K = 0, X = 0;
  std::vector<int> l_layers, moe_layers;
  std::vector<std::string> score_names;
  std::vector<float> logits, l_out, scores;  // [T][V], [L][T][E], [M][T][X]
  std::vector<int32_t> topk;                 // [M][T][K]
  std::vector<llama_token> tokens;

  const float* row(int t) const { return logits.data() + (size_t)t * V; }
  const float* lrow(int li, int t) const { return l_out.data() + ((size_t)li * T + t) * E; }
  const int32_t* kids(int mi, int t) const { return topk.data() + ((size_t)mi * T + t) * K; }
  const float* srow(int mi, int t) const { return scores.data() + ((size_t)mi * T + t) * X; }
  std::vector<int> sorted_ids(int mi, int t) const {
    std::vector<int> v(kids(mi, t), kids(mi, t) + K);
    std::sort(v.begin(), v.end());
    return v;
  }
  double gap(int mi, int t) const { return routing_gap(srow(mi, t), X, kids(mi, t), K); }
};

TfData load_tf(const std::string& dir, const json& run, const std::string& name);

struct Top {
  int id;
  float v;
};

// descending by value, the lower id first on a tie (like the greedy argmax)
std::vector<Top> top_n(const float* x, int V, int n);

float margin_of(const float* x, int V);

// Logit statistics of `rows` rows of a path against the reference.
struct LogitStats {
  int rows = 0;
  float max_abs = 0, p99 = 0, mean = 0, max_pair = 0;
  int agree = 0;
  std::vector<float> disagree_margins;
};

LogitStats logit_stats(const std::vector<const float*>& ref, const std::vector<const float*>& path, int V);

json logit_stats_json(const LogitStats& s);

}  // namespace golden_maker
