#include "tolerance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "cpu_paths.h"
#include "fixture_json.h"

namespace golden_maker {

namespace {

// Rounds up to 2 significant digits (3.6007 -> 3.7, 0.0013195 -> 0.0014, 3.6 -> 3.6), via the decimal string
// so that the result is the double nearest to a 2-digit decimal.
double ceil2(double x) {
  if (x <= 0) {
    return 0.0;
  }
  const int e = (int)std::floor(std::log10(x));
  double m = x / std::pow(10.0, e - 1);  // in [10, 100)
  double r = std::round(m);
  long d = (std::fabs(m - r) <= 1e-9 * r) ? (long)r : (long)std::ceil(m);
  int ex = e - 1;
  if (d >= 100) {
    d /= 10;
    ex += 1;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%lde%d", d, ex);
  return strtod(buf, nullptr);
}

}  // namespace

Tolerances derive_tolerances(const PathSpread& paths, const DecodeVsBatched& decode_vs_batched) {
  const double T_tol = ceil2(2.0 * std::max(paths.max_abs_logit_diff, decode_vs_batched.max_abs_logit_diff));
  const double M_tol =
      ceil2(2.0 * std::max(paths.max_pair_diff_top10, decode_vs_batched.max_pair_diff_top10));
  const double G_tol = ceil2(2.0 * paths.max_boundary_gap_change);
  json lt = json::array(), ltt = json::array();
  for (size_t li = 0; li < paths.l_out_rel_l2.size(); li++) {
    lt.push_back(std::max(1e-4, ceil2(2.0 * paths.l_out_rel_l2[li])));
    ltt.push_back(std::max(1e-4, ceil2(2.0 * paths.l_out_max_token_rel_l2[li])));
  }
  return {T_tol, M_tol, G_tol, lt, ltt};
}

json tolerance_section(const Tolerances& tolerances, const PathSpread& paths,
                       const std::map<std::string, std::vector<float>>& ref_step_margin,
                       const std::vector<std::string>& selection_tensors) {
  const double T_tol = tolerances.logit_abs, M_tol = tolerances.argmax_margin, G_tol = tolerances.routing_gap;
  auto fmt = [](double x) { return py_float(x); };

  float min_ref_margin = std::numeric_limits<float>::infinity();
  for (const char* s : kSeqs) {
    for (float m : ref_step_margin.at(s)) {
      min_ref_margin = std::min(min_ref_margin, m);
    }
  }
  // greedy ids are required exactly only where llama.cpp's own paths all agree on every step and every
  // reference step is clear of the argmax tolerance (lfm2moe-tiny-f16 in the shipped set)
  const bool exact = paths.paths_with_different_greedy_ids.empty() && min_ref_margin > M_tol;

  json tol;
  tol["logit_abs"] = T_tol;
  tol["argmax_margin"] = M_tol;
  tol["routing_gap"] = G_tol;
  tol["l_out_rel_l2"] = tolerances.l_out_rel_l2;
  tol["l_out_token_rel_l2"] = tolerances.l_out_token_rel_l2;
  tol["derivation"] =
      "2 x the largest spread measured between llama.cpp's own CPU paths (spread.all_paths: repack vs "
      "no-repack, "
      "AVX2, SSE4.2 and scalar kernels, decode vs batched), rounded up to 2 significant digits: logit_abs = "
      "2 x max "
      "|logit diff|; argmax_margin = 2 x max change of (logit_j - logit_top) over the reference's 10 best "
      "tokens; "
      "routing_gap = 2 x max change of the reference's boundary gap (score of the k-th chosen expert minus "
      "the best "
      "unchosen one); l_out = 2 x the per-layer relative L2 spread (floor 1e-4)";
  tol["repack_only"] = {{"logit_abs", ceil2(2.0 * paths.repack_max_abs_logit_diff)},
                        {"argmax_margin", ceil2(2.0 * paths.repack_max_pair_diff_top10)}};
  if (exact) {
    tol["greedy_ids_exact"] = true;
    json ev;
    ev["paths_with_identical_greedy_ids"] = paths.paths_with_same_greedy_ids;
    ev["paths_with_different_greedy_ids"] = json::array();
    ev["steps_per_path"] = 3 * kNPredict;
    ev["min_reference_margin"] = f32(min_ref_margin);
    ev["argmax_margin"] = M_tol;
    tol["greedy_ids_exact_evidence"] = ev;
  }
  std::set<std::string> sel(selection_tensors.begin(), selection_tensors.end());
  std::string sel_s;
  for (const auto& s : sel) {
    sel_s += (sel_s.empty() ? "" : ", ") + s.substr(0, s.rfind('-')) + "-N";
  }
  json rule;
  rule["routing"] =
      "routing gap of a (token, MoE layer) = selection score of the k-th chosen expert minus the best "
      "unchosen one in the reference (lfm2moe: sigmoid(z)+exp_probs_b, qwen3moe: softmax(z), gpt-oss: "
      "z+bias; this model: the values of llama.cpp's graph tensor " +
      sel_s +
      ", the input of ffn_moe_argsort-N). The engine's set of chosen experts must equal the "
      "reference's wherever that gap > " +
      fmt(G_tol) + "; where it is <= " + fmt(G_tol) +
      " (a routing near-tie, listed in routing_near_ties) either set is accepted, but if the engine "
      "picked a different set there, its positions from that token on are exempt from the logit checks";
  rule["teacher_forced_logits"] =
      "feed teacher_forced.tokens as one sequence; for every position i (before any "
      "exempting near-tie flip): max over the vocabulary |logit[i][v] - ref[i][v]| <= " +
      fmt(T_tol) +
      ", and argmax(logit[i]) == argmax(ref[i]) wherever the reference "
      "margin (top1 - top2) > " +
      fmt(M_tol);
  if (exact) {
    rule["greedy_ids"] =
        "generate n_predict tokens greedily from prompt_ids: the produced ids must equal "
        "generated_ids at every one of the n_predict steps of every generation case (no "
        "divergence is allowed; fewer ids fail). Exact because every other llama.cpp CPU path "
        "produced exactly these ids and every reference step's margin is >= " +
        py_float((double)min_ref_margin) + " > " + fmt(M_tol);
    rule["greedy_top5"] = "at every step, the engine's logits of the reference top-5 ids are within " +
                          fmt(T_tol) + " of the reference values";
  } else {
    rule["greedy_ids"] =
        "generate n_predict tokens greedily from prompt_ids; walk the steps in order: a produced id "
        "may differ from generated_ids only at a step whose reference margin <= " +
        fmt(M_tol) +
        "; the comparison stops at the first such (allowed) divergence; any other difference, or "
        "fewer ids, fails";
    rule["greedy_top5"] =
        "while the produced ids equal the reference, the engine's logits of the reference top-5 "
        "ids at each step are within " +
        fmt(T_tol) + " of the reference values";
  }
  rule["l_out"] =
      "for layers.tokens (one batch), per layer N: ||l_out_N - ref_N||_2 / ||ref_N||_2 over all tokens <= "
      "tolerance.l_out_rel_l2[N], and for every token the same ratio over that token's row <= "
      "tolerance.l_out_token_rel_l2[N]; the first failing layer is where the divergence starts";
  tol["rule"] = rule;
  return tol;
}

}  // namespace golden_maker
