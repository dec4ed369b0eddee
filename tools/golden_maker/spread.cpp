#include "spread.h"

#include <algorithm>
#include <cmath>

#include "cpu_paths.h"
#include "fixture_json.h"
#include "llama_util.h"

namespace golden_maker {

PathSpread measure_paths(const std::string& work, const json& ref,
                         const std::map<std::string, TfData>& ref_ext,
                         const std::map<std::string, std::vector<float>>& ref_step_margin, int V) {
  const size_t L = ref_ext.at("short").l_layers.size();
  const size_t M = ref_ext.at("short").moe_layers.size();

  json paths_j = json::object();
  float all_max_abs = 0, all_max_pair = 0, all_max_gap = 0;
  std::vector<float> all_lout(L, 0.f), all_lout_tok(L, 0.f);
  json repack_j;
  float repack_max_abs = 0, repack_max_pair = 0;
  std::vector<std::string> same_ids_paths, diff_ids_paths;
  for (const auto& p : kPaths) {
    const std::string dir = work + "/" + p.key;
    const json run = read_json(dir + "/run.json");
    // greedy ids
    bool greedy_equal = true;
    json first_div = json::array();
    for (const char* s : kSeqs) {
      const auto a = ids_from(ref.at("gen").at(s).at("ids"));
      const auto b = ids_from(run.at("gen").at(s).at("ids"));
      int d = -1;
      for (int i = 0; i < kNPredict; i++) {
        if (a[i] != b[i]) {
          d = i;
          break;
        }
      }
      if (d >= 0) {
        greedy_equal = false;
        first_div.push_back(json::array({s, d, f32(ref_step_margin.at(s)[d])}));
      } else {
        first_div.push_back(json::array({s, nullptr, nullptr}));
      }
    }
    (greedy_equal ? same_ids_paths : diff_ids_paths).push_back(p.key);

    json per_seq = json::array();
    float max_abs = 0, max_pair = 0, max_gap = 0, max_dis_margin = 0;
    bool any_dis = false;
    int n_dis = 0, rows = 0, decisions = 0, differ = 0;
    std::vector<float> lout(L, 0.f), lout_tok(L, 0.f);
    json flips_all = json::array();
    for (const char* s : kSeqs) {
      const TfData& R = ref_ext.at(s);
      const TfData P = load_tf(dir, run, std::string("ext_") + s);
      if (P.tokens != R.tokens || P.moe_layers != R.moe_layers || P.l_layers != R.l_layers) {
        fail("path %s, %s: tokens or layers differ from the reference run", p.key, s);
      }
      // expert choices and routing gaps over every row; the first flip (a routing near-tie where this path
      // chose another set) ends the rows that the logit and l_out statistics use
      int first_flip = -1, seq_differ = 0;
      double seq_gap = 0;
      json flips = json::array();
      for (int t = 0; t < R.T; t++) {
        for (size_t mi = 0; mi < M; mi++) {
          const bool same = R.sorted_ids((int)mi, t) == P.sorted_ids((int)mi, t);
          if (!same) {
            seq_differ++;
            if (first_flip < 0) {
              first_flip = t;
            }
            flips.push_back(json::array({t, R.moe_layers[mi], f32(R.gap((int)mi, t))}));
            flips_all.push_back(json::array({t, R.moe_layers[mi], f32(R.gap((int)mi, t)), s}));
          }
          // change of the reference's boundary gap: the same two experts' scores in this path
          const double g_ref = R.gap((int)mi, t);
          const double g_path = routing_gap(P.srow((int)mi, t), P.X, R.kids((int)mi, t), R.K);
          seq_gap = std::max(seq_gap, std::fabs(g_path - g_ref));
        }
      }
      const int n_rows = first_flip < 0 ? R.T : first_flip;
      std::vector<const float*> ra, pa;
      for (int t = 0; t < n_rows; t++) {
        ra.push_back(R.row(t));
        pa.push_back(P.row(t));
      }
      const LogitStats ls = logit_stats(ra, pa, V);
      json o = logit_stats_json(ls);
      o["expert_decisions"] = R.T * (int)M;
      o["expert_choices_differ"] = seq_differ;
      o["expert_flips"] = flips;
      o["first_flip_token"] = first_flip < 0 ? json(nullptr) : json(first_flip);
      o["max_boundary_gap_change"] = f32(seq_gap);
      std::vector<float> sl(L), st(L);
      for (size_t li = 0; li < L; li++) {
        double num = 0, den = 0;
        float tok_max = 0;
        for (int t = 0; t < n_rows; t++) {
          double tn = 0, td = 0;
          for (int e = 0; e < R.E; e++) {
            const double a = R.lrow((int)li, t)[e], b = P.lrow((int)li, t)[e];
            tn += (b - a) * (b - a);
            td += a * a;
          }
          num += tn;
          den += td;
          tok_max = std::max(tok_max, (float)std::sqrt(tn / td));
        }
        sl[li] = (float)std::sqrt(num / den);
        st[li] = tok_max;
        lout[li] = std::max(lout[li], sl[li]);
        lout_tok[li] = std::max(lout_tok[li], st[li]);
      }
      o["l_out_rel_l2"] = float_list(sl);
      o["l_out_max_token_rel_l2"] = float_list(st);
      o["sequence"] = s;
      per_seq.push_back(o);

      max_abs = std::max(max_abs, ls.max_abs);
      max_pair = std::max(max_pair, ls.max_pair);
      max_gap = std::max(max_gap, (float)seq_gap);
      rows += ls.rows;
      n_dis += (int)ls.disagree_margins.size();
      for (float m : ls.disagree_margins) {
        max_dis_margin = any_dis ? std::max(max_dis_margin, m) : m;
        any_dis = true;
      }
      decisions += R.T * (int)M;
      differ += seq_differ;
    }
    json o;
    o["what"] = p.what;
    o["greedy_ids_equal_to_reference"] = greedy_equal;
    o["greedy_first_divergence_step_and_ref_margin"] = first_div;
    o["max_abs_logit_diff"] = f32(max_abs);
    o["max_pair_diff_top10"] = f32(max_pair);
    o["argmax_disagreements"] = n_dis;
    o["max_ref_margin_at_argmax_disagreement"] = nullable_f32(any_dis, max_dis_margin);
    o["rows"] = rows;
    o["expert_decisions"] = decisions;
    o["expert_choices_differ"] = differ;
    o["expert_flips_token_layer_refgap"] = flips_all;
    o["max_boundary_gap_change"] = f32(max_gap);
    o["l_out_rel_l2"] = float_list(lout);
    o["l_out_max_token_rel_l2"] = float_list(lout_tok);
    o["per_sequence"] = per_seq;
    if (run.at("cpu_variant") != ref.at("cpu_variant") && std::string(p.backend) == "ref") {
      fail("path %s ran on %s, the reference on %s", p.key, run.at("cpu_variant").get<std::string>().c_str(),
           ref.at("cpu_variant").get<std::string>().c_str());
    }
    o["cpu_variant"] = run.at("cpu_variant");
    paths_j[p.key] = o;

    all_max_abs = std::max(all_max_abs, max_abs);
    all_max_pair = std::max(all_max_pair, max_pair);
    all_max_gap = std::max(all_max_gap, max_gap);
    for (size_t li = 0; li < L; li++) {
      all_lout[li] = std::max(all_lout[li], lout[li]);
      all_lout_tok[li] = std::max(all_lout_tok[li], lout_tok[li]);
    }
    if (std::string(p.key) == "no_repack") {
      repack_max_abs = max_abs;
      repack_max_pair = max_pair;
      repack_j["max_abs_logit_diff"] = f32(max_abs);
      repack_j["max_pair_diff_top10"] = f32(max_pair);
      repack_j["l_out_rel_l2"] = float_list(lout);
      repack_j["expert_choices_differ"] = differ;
      repack_j["expert_decisions"] = decisions;
    }
  }

  PathSpread out;
  out.paths = std::move(paths_j);
  out.max_abs_logit_diff = all_max_abs;
  out.max_pair_diff_top10 = all_max_pair;
  out.max_boundary_gap_change = all_max_gap;
  out.l_out_rel_l2 = std::move(all_lout);
  out.l_out_max_token_rel_l2 = std::move(all_lout_tok);
  out.repack_vs_no_repack = std::move(repack_j);
  out.repack_max_abs_logit_diff = repack_max_abs;
  out.repack_max_pair_diff_top10 = repack_max_pair;
  out.paths_with_same_greedy_ids = std::move(same_ids_paths);
  out.paths_with_different_greedy_ids = std::move(diff_ids_paths);
  return out;
}

DecodeVsBatched measure_decode_vs_batched(const json& prompt_ids,
                                          const std::map<std::string, TfData>& ref_ext,
                                          const std::map<std::string, std::vector<float>>& ref_gen_logits,
                                          int V) {
  json dvb_seq = json::array();
  float dvb_max_abs = 0, dvb_max_pair = 0, dvb_max_margin = 0;
  int dvb_dis = 0, dvb_rows = 0;
  bool dvb_any = false;
  for (const char* s : kSeqs) {
    const TfData& R = ref_ext.at(s);
    const int P = (int)prompt_ids.at(s).size();
    std::vector<const float*> batched, decoded;
    for (int i = 0; i < kNPredict; i++) {
      batched.push_back(R.row(P - 1 + i));
      decoded.push_back(ref_gen_logits.at(s).data() + (size_t)i * V);
    }
    const LogitStats ls = logit_stats(batched, decoded, V);
    json o = logit_stats_json(ls);
    o["sequence"] = s;
    dvb_seq.push_back(o);
    dvb_max_abs = std::max(dvb_max_abs, ls.max_abs);
    dvb_max_pair = std::max(dvb_max_pair, ls.max_pair);
    dvb_rows += ls.rows;
    dvb_dis += (int)ls.disagree_margins.size();
    for (float m : ls.disagree_margins) {
      dvb_max_margin = dvb_any ? std::max(dvb_max_margin, m) : m;
      dvb_any = true;
    }
  }
  json dvb;
  dvb["max_abs_logit_diff"] = f32(dvb_max_abs);
  dvb["max_pair_diff_top10"] = f32(dvb_max_pair);
  dvb["argmax_disagreements"] = dvb_dis;
  dvb["max_ref_margin_at_argmax_disagreement"] = nullable_f32(dvb_any, dvb_max_margin);
  dvb["rows"] = dvb_rows;
  dvb["what"] =
      "reference decode path (one token per llama_decode, the greedy steps) vs the batched "
      "teacher-forced rows";
  dvb["per_sequence"] = dvb_seq;
  DecodeVsBatched out;
  out.section = std::move(dvb);
  out.max_abs_logit_diff = dvb_max_abs;
  out.max_pair_diff_top10 = dvb_max_pair;
  return out;
}

json spread_section(const PathSpread& paths, const DecodeVsBatched& decode_vs_batched,
                    const json& reference_system_info) {
  json spread;
  spread["method"] =
      "llama.cpp against itself on identical token sequences: each prompt + its first 31 greedy "
      "tokens, teacher-forced in one batch, reference path vs each other CPU path; rows after the "
      "first token whose expert choice flipped (a routing near-tie) are left out of the logit / "
      "l_out statistics and the flips are listed";
  spread["reference_system_info"] = reference_system_info;
  spread["repack_vs_no_repack"] = paths.repack_vs_no_repack;
  json allp;
  allp["max_abs_logit_diff"] = f32(paths.max_abs_logit_diff);
  allp["max_pair_diff_top10"] = f32(paths.max_pair_diff_top10);
  allp["max_boundary_gap_change"] = f32(paths.max_boundary_gap_change);
  allp["l_out_rel_l2"] = float_list(paths.l_out_rel_l2);
  allp["l_out_max_token_rel_l2"] = float_list(paths.l_out_max_token_rel_l2);
  spread["all_paths"] = allp;
  spread["paths"] = paths.paths;
  spread["decode_vs_batched"] = decode_vs_batched.section;
  return spread;
}

}  // namespace golden_maker
