#include "reference_sections.h"

#include <algorithm>
#include <limits>

#include "cpu_paths.h"
#include "fixture_json.h"
#include "llama_util.h"

namespace golden_maker {

ReferenceGenerations generation_section(const std::string& ref_dir, const json& ref, const json& prompt_ids,
                                        int V) {
  std::map<std::string, std::vector<float>> ref_gen_logits;
  std::map<std::string, std::vector<float>> ref_step_margin;
  json gens = json::array();
  for (const char* s : kSeqs) {
    const auto prompt = ids_from(prompt_ids.at(s));
    const auto ids = ids_from(ref.at("gen").at(s).at("ids"));
    auto logits = read_vec<float>(ref_dir + "/gen." + s + ".logits.f32", (size_t)kNPredict * V);
    json steps = json::array();
    float min_margin = std::numeric_limits<float>::infinity();
    for (int i = 0; i < kNPredict; i++) {
      const float* row = logits.data() + (size_t)i * V;
      const auto t5 = top_n(row, V, 5);
      const float m = t5[0].v - t5[1].v;
      if (t5[0].id != ids[i]) {
        fail("internal: greedy id mismatch at %s step %d", s, i);
      }
      ref_step_margin[s].push_back(m);
      min_margin = std::min(min_margin, m);
      json top5 = json::array();
      for (const auto& t : t5) {
        top5.push_back(json::array({t.id, f32(t.v)}));
      }
      json st;
      st["step"] = i;
      st["pos"] = (int)prompt.size() - 1 + i;
      st["token"] = ids[i];
      st["margin"] = f32(m);
      st["top5"] = top5;
      steps.push_back(st);
    }
    json g;
    g["name"] = s;
    g["prompt_ids"] = ids_json(prompt);
    g["n_predict"] = kNPredict;
    g["generated_ids"] = ids_json(ids);
    g["min_margin"] = f32(min_margin);
    g["steps"] = steps;
    gens.push_back(g);
    ref_gen_logits[s] = std::move(logits);
  }
  ReferenceGenerations out;
  out.section = std::move(gens);
  out.logits = std::move(ref_gen_logits);
  out.step_margin = std::move(ref_step_margin);
  return out;
}

json teacher_forced_section(const TfData& tfd, int V, const Tolerances& tolerances,
                            const std::string& out_dir, const std::string& name) {
  const double M_tol = tolerances.argmax_margin, G_tol = tolerances.routing_gap;
  json tfj;
  tfj["prompt"] = "medium";
  tfj["tokens"] = ids_json(tfd.tokens);
  tfj["logits_file"] = name + ".tf_logits.f32";
  tfj["dtype"] = "float32 little-endian";
  tfj["shape"] = json::array({tfd.T, V});
  tfj["row_meaning"] =
      "row i = raw logits after feeding tokens[0..i] (all positions of one batch, every row's "
      "logits requested)";
  write_vec(out_dir + "/" + name + ".tf_logits.f32", tfd.logits);
  tfj["sha256"] = sha256_hex(tfd.logits.data(), tfd.logits.size() * sizeof(float));
  json am = json::array(), mg = json::array();
  int above = 0;
  for (int t = 0; t < tfd.T; t++) {
    am.push_back(argmax_lowest(tfd.row(t), V));
    const float m = margin_of(tfd.row(t), V);
    mg.push_back(f32(m));
    above += m > M_tol;
  }
  tfj["argmax"] = am;
  tfj["margin"] = mg;
  tfj["positions_with_margin_above_tolerance"] = above;
  double min_gap = std::numeric_limits<double>::infinity();
  json ties = json::array();
  for (int t = 0; t < tfd.T; t++) {
    for (size_t mi = 0; mi < tfd.moe_layers.size(); mi++) {
      const double g = tfd.gap((int)mi, t);
      min_gap = std::min(min_gap, g);
      if (g <= G_tol) {
        ties.push_back(json::array({t, tfd.moe_layers[mi], f32((float)g), tfd.sorted_ids((int)mi, t)}));
      }
    }
  }
  tfj["min_routing_gap"] = f32((float)min_gap);
  tfj["routing_near_ties"] = ties;
  tfj["routing_near_ties_format"] = "[token index, layer, reference gap, reference sorted expert ids]";
  tfj["moe_layers"] = tfd.moe_layers;
  json ec = json::array();
  for (size_t mi = 0; mi < tfd.moe_layers.size(); mi++) {
    json rows = json::array();
    for (int t = 0; t < tfd.T; t++) {
      rows.push_back(tfd.sorted_ids((int)mi, t));
    }
    ec.push_back(rows);
  }
  tfj["expert_choices"] = ec;
  tfj["expert_choices_meaning"] =
      "[moe_layer][token][k]: reference expert ids (sorted) for every token of tokens";
  tfj["selection_tensors"] = tfd.score_names;
  return tfj;
}

json layers_section(const TfData& lay, const Tolerances& tolerances, const std::string& out_dir,
                    const std::string& name) {
  const double G_tol = tolerances.routing_gap;
  json lj;
  lj["prompt"] = "short";
  lj["tokens"] = ids_json(lay.tokens);
  lj["l_out_file"] = name + ".l_out.f32";
  lj["l_out_dtype"] = "float32 little-endian";
  lj["l_out_shape"] = json::array({(int)lay.l_layers.size(), lay.T, lay.E});
  lj["l_out_meaning"] =
      "[layer][token][hidden]: residual stream after layer N (llama.cpp graph tensor "
      "l_out-N), all tokens of the prompt batch";
  lj["l_out_layers"] = lay.l_layers;
  write_vec(out_dir + "/" + name + ".l_out.f32", lay.l_out);
  lj["l_out_sha256"] = sha256_hex(lay.l_out.data(), lay.l_out.size() * sizeof(float));
  std::vector<float> topk_f;
  json ec = json::array(), gaps = json::array(), ties = json::array();
  for (size_t mi = 0; mi < lay.moe_layers.size(); mi++) {
    json rows = json::array(), g = json::array();
    for (int t = 0; t < lay.T; t++) {
      const auto ids = lay.sorted_ids((int)mi, t);
      for (int id : ids) {
        topk_f.push_back((float)id);
      }
      rows.push_back(ids);
      const double gp = lay.gap((int)mi, t);
      g.push_back(f32((float)gp));
      if (gp <= G_tol) {
        ties.push_back(json::array({t, lay.moe_layers[mi], f32((float)gp)}));
      }
    }
    ec.push_back(rows);
    gaps.push_back(g);
  }
  lj["expert_choices_file"] = name + ".topk.f32";
  lj["expert_choices_dtype"] = "float32 little-endian (integer-valued expert ids)";
  lj["expert_choices_shape"] = json::array({(int)lay.moe_layers.size(), lay.T, lay.K});
  lj["expert_choices_meaning"] =
      "[moe_layer][token][k]: ids chosen by llama.cpp (ffn_moe_topk-N), sorted "
      "ascending per token; moe_layers gives N for each first index";
  lj["moe_layers"] = lay.moe_layers;
  write_vec(out_dir + "/" + name + ".topk.f32", topk_f);
  lj["expert_choices_sha256"] = sha256_hex(topk_f.data(), topk_f.size() * sizeof(float));
  lj["expert_choices"] = ec;
  lj["routing_gap"] = gaps;
  lj["routing_gap_meaning"] =
      "[moe_layer][token]: reference selection score of the k-th chosen expert minus the "
      "best unchosen one";
  lj["routing_near_ties"] = ties;
  return lj;
}

}  // namespace golden_maker
