// `spread`: llama.cpp's other CPU paths, and its decode path, against the reference on the same tokens.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common.h"
#include "stats.h"

namespace golden_maker {

// What the other CPU paths measured, over all of them; `paths` holds the per-path (and per-sequence) details.
struct PathSpread {
  json paths;
  float max_abs_logit_diff = 0, max_pair_diff_top10 = 0, max_boundary_gap_change = 0;
  std::vector<float> l_out_rel_l2, l_out_max_token_rel_l2;  // per l_out layer
  json repack_vs_no_repack;
  float repack_max_abs_logit_diff = 0, repack_max_pair_diff_top10 = 0;
  std::vector<std::string> paths_with_same_greedy_ids, paths_with_different_greedy_ids;
};

// ref_ext: the reference's extended sequences by sequence name; ref_step_margin: its greedy steps' margins.
PathSpread measure_paths(const std::string& work, const json& ref,
                         const std::map<std::string, TfData>& ref_ext,
                         const std::map<std::string, std::vector<float>>& ref_step_margin, int V);

struct DecodeVsBatched {
  json section;
  float max_abs_logit_diff = 0, max_pair_diff_top10 = 0;
};

// decode vs batched: the reference's greedy steps (step 0 from the prompt batch, then single-token decodes)
// against the same positions of its batched extended sequence
DecodeVsBatched measure_decode_vs_batched(const json& prompt_ids,
                                          const std::map<std::string, TfData>& ref_ext,
                                          const std::map<std::string, std::vector<float>>& ref_gen_logits,
                                          int V);

json spread_section(const PathSpread& paths, const DecodeVsBatched& decode_vs_batched,
                    const json& reference_system_info);

}  // namespace golden_maker
