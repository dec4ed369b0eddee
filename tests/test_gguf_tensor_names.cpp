// Which tensor names are routed-expert weights (the ones the expert store streams).
#include <gtest/gtest.h>

#include "gguf/tensor_names.h"

namespace df::gguf {
namespace {

TEST(TensorNames, RoutedExpertWeightsAreParsed) {
  auto n = parse_expert_tensor_name("blk.17.ffn_down_exps.weight");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->layer, 17);
  EXPECT_EQ(n->kind, ExpertTensorKind::Down);
  EXPECT_EQ(parse_expert_tensor_name("blk.0.ffn_gate_exps.weight")->kind, ExpertTensorKind::Gate);
  EXPECT_EQ(parse_expert_tensor_name("blk.3.ffn_up_exps.weight")->kind, ExpertTensorKind::Up);
  EXPECT_EQ(parse_expert_tensor_name("blk.3.ffn_gate_up_exps.weight")->kind, ExpertTensorKind::GateUp);
}

TEST(TensorNames, EverythingElseIsResident) {
  for (const char* name : {"blk.3.ffn_gate_exps.bias", "blk.3.ffn_gate_shexp.weight", "blk.3.ffn_gate.weight",
                           "blk.3.ffn_gate_inp.weight", "token_embd.weight", "blk.x.ffn_up_exps.weight",
                           "blk.-1.ffn_up_exps.weight", "blk..ffn_up_exps.weight", "blk.3.attn_exps.weight",
                           "blk.3.ffn_up_exps.weight.extra", ""})
    EXPECT_FALSE(is_routed_expert_weight(name)) << name;
}

}  // namespace
}  // namespace df::gguf
