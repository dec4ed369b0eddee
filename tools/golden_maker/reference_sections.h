// The fixture's sections that hold the reference's own outputs: `generation`, `teacher_forced`, `layers`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common.h"
#include "stats.h"
#include "tolerance.h"

namespace golden_maker {

struct ReferenceGenerations {
  json section;                                           // `generation`
  std::map<std::string, std::vector<float>> logits;       // per sequence: every step's logits
  std::map<std::string, std::vector<float>> step_margin;  // per sequence: every step's top1 - top2
};

ReferenceGenerations generation_section(const std::string& ref_dir, const json& ref, const json& prompt_ids,
                                        int V);

// Also writes out_dir/NAME.tf_logits.f32.
json teacher_forced_section(const TfData& tfd, int V, const Tolerances& tolerances,
                            const std::string& out_dir, const std::string& name);

// Also writes out_dir/NAME.l_out.f32 and out_dir/NAME.topk.f32.
json layers_section(const TfData& lay, const Tolerances& tolerances, const std::string& out_dir,
                    const std::string& name);

}  // namespace golden_maker
