// `tolerance`: the golden rule's bounds, derived from the spread, and the rule texts that state them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common.h"
#include "spread.h"

namespace golden_maker {

struct Tolerances {
  double logit_abs = 0, argmax_margin = 0, routing_gap = 0;  // T, M, G
  json l_out_rel_l2, l_out_token_rel_l2;                     // per l_out layer
};

// 2x the largest spread, rounded up to 2 significant digits
Tolerances derive_tolerances(const PathSpread& paths, const DecodeVsBatched& decode_vs_batched);

// ref_step_margin: the reference's greedy steps' margins; selection_tensors: the graph tensors the routing
// scores were read from
json tolerance_section(const Tolerances& tolerances, const PathSpread& paths,
                       const std::map<std::string, std::vector<float>>& ref_step_margin,
                       const std::vector<std::string>& selection_tensors);

}  // namespace golden_maker
