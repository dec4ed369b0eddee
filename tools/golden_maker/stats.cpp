#include "stats.h"

#include <cmath>
#include <limits>

#include "fixture_json.h"
#include "llama_util.h"

namespace golden_maker {

double routing_gap(const float* scores, int n_expert, const int32_t* chosen, int k) {
  std::vector<char> is_chosen(n_expert, 0);
  float kth = std::numeric_limits<float>::infinity();
  for (int i = 0; i < k; i++) {
    is_chosen[chosen[i]] = 1;
    kth = std::min(kth, scores[chosen[i]]);
  }
  float best_other = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < n_expert; e++) {
    if (!is_chosen[e]) {
      best_other = std::max(best_other, scores[e]);
    }
  }
  return (double)kth - (double)best_other;
}

TfData load_tf(const std::string& dir, const json& run, const std::string& name) {
  const json& o = run.at("tf").at(name);
  TfData d;
  d.tokens = ids_from(o.at("tokens"));
  d.T = (int)d.tokens.size();
  d.V = run.at("n_vocab");
  d.E = o.at("n_embd");
  d.K = o.at("k");
  d.X = o.at("n_expert");
  for (const auto& x : o.at("l_out_layers")) {
    d.l_layers.push_back(x);
  }
  for (const auto& x : o.at("moe_layers")) {
    d.moe_layers.push_back(x);
  }
  for (const auto& x : o.at("score_tensors")) {
    d.score_names.push_back(x);
  }
  const size_t L = d.l_layers.size(), M = d.moe_layers.size();
  d.logits = read_vec<float>(dir + "/tf." + name + ".logits.f32", (size_t)d.T * d.V);
  d.l_out = read_vec<float>(dir + "/tf." + name + ".l_out.f32", L * d.T * d.E);
  d.topk = read_vec<int32_t>(dir + "/tf." + name + ".topk.i32", M * d.T * d.K);
  d.scores = read_vec<float>(dir + "/tf." + name + ".scores.f32", M * d.T * d.X);
  return d;
}

std::vector<Top> top_n(const float* x, int V, int n) {
  std::vector<int> idx(V);
  for (int i = 0; i < V; i++) {
    idx[i] = i;
  }
  n = std::min(n, V);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::vector<Top> out;
  for (int i = 0; i < n; i++) {
    out.push_back({idx[i], x[idx[i]]});
  }
  return out;
}

float margin_of(const float* x, int V) {
  const auto t = top_n(x, V, 2);
  return t[0].v - t[1].v;
}

LogitStats logit_stats(const std::vector<const float*>& ref, const std::vector<const float*>& path, int V) {
  LogitStats s;
  std::vector<float> all;
  double sum = 0;
  s.rows = (int)ref.size();
  for (size_t r = 0; r < ref.size(); r++) {
    const float* a = ref[r];
    const float* b = path[r];
    for (int v = 0; v < V; v++) {
      const float d = std::fabs(b[v] - a[v]);
      all.push_back(d);
      sum += d;
      s.max_abs = std::max(s.max_abs, d);
    }
    // the change of (logit_j - logit_top) over the reference's 10 best tokens
    const auto top = top_n(a, V, 10);
    const int t0 = top[0].id;
    for (const auto& tj : top) {
      const float ch = std::fabs((b[tj.id] - b[t0]) - (a[tj.id] - a[t0]));
      s.max_pair = std::max(s.max_pair, ch);
    }
    if (argmax_lowest(a, V) == argmax_lowest(b, V)) {
      s.agree++;
    } else {
      s.disagree_margins.push_back(margin_of(a, V));
    }
  }
  if (!all.empty()) {
    // numpy.percentile(.., 99) with linear interpolation
    const double pos = 0.99 * (double)(all.size() - 1);
    const size_t lo = (size_t)std::floor(pos);
    std::nth_element(all.begin(), all.begin() + lo, all.end());
    const float vlo = all[lo];
    float vhi = vlo;
    if (lo + 1 < all.size()) {
      vhi = *std::min_element(all.begin() + lo + 1, all.end());
    }
    s.p99 = (float)(vlo + (vhi - vlo) * (pos - (double)lo));
    s.mean = (float)(sum / (double)all.size());
  }
  return s;
}

json logit_stats_json(const LogitStats& s) {
  json o;
  o["rows"] = s.rows;
  o["max_abs_logit_diff"] = f32(s.max_abs);
  o["p99_abs_logit_diff"] = f32(s.p99);
  o["mean_abs_logit_diff"] = f32(s.mean);
  o["max_pair_diff_top10"] = f32(s.max_pair);
  o["argmax_agree"] = s.agree;
  json m = json::array();
  for (float x : s.disagree_margins) {
    m.push_back(f32(x));
  }
  o["argmax_disagree_ref_margins"] = m;
  return o;
}

}  // namespace golden_maker
