// The seam between the models and the backends: a model loaded with a second Backend implementation — one
// that is not the CPU backend but forwards every op to one through the interface, counting the calls — gives
// the same bits as the model on the default backend, for every golden architecture; every op the model
// needs went through the interface (nothing reached a concrete backend another way); and every operand of
// every op was memory that backend handed out (no host array of the model's own reached an op).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "backend/buffer_access.h"
#include "forwarding_backend.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"

namespace df::models {
namespace {

using df::testing::every_logit;
using df::testing::ForwardingBackend;

class SecondBackend : public ::testing::TestWithParam<const char*> {};

TEST_P(SecondBackend, AForwardingBackendGivesTheSameBitsAndSeesEveryOp) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = df::testing::golden_json(name)["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
  LoadOptions two_threads;
  two_threads.n_threads = 2;
  auto plain = load_model(file, two_threads);
  auto forwarding = std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 2}));
  LoadOptions o;
  o.backend = forwarding;
  auto seamed = load_model(file, o);
  const auto want = every_logit(*plain, tokens);
  forwarding->calls.clear();  // what the forward passes (not the loading) asked for
  const auto got = every_logit(*seamed, tokens);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);

  std::vector<std::string> expected = {"get_rows",        "rms_norm",  "matmul",  "ffn",
                                       "moe_combine_add", "attention", "kv_store"};
  // qwen3moe's layers add their two branches through matmul_add and routed_ffn_add alone.
  if (name != "qwen3moe-tiny") expected.push_back("add");
  // The models whose attention is qk_norm_attention (or whose mixers end in a projection added to x).
  if (name != "gpt-oss-tiny" && name.rfind("gemma4", 0) != 0) expected.push_back("matmul_add");
  // The models whose routers are a norm, a matrix and a choice ask for the three as one op.
  const bool own_router = name == "gpt-oss-tiny" || name.rfind("gemma4", 0) == 0;
  expected.push_back(own_router ? "route" : "norm_route");
  // qk_norm_attention's per-head norms and RoPE of Q and K are one op; the other attentions rotate alone.
  expected.push_back(name == "gpt-oss-tiny" || name.rfind("gemma4", 0) == 0 ? "rope" : "norm_rope");
  if (name.rfind("lfm2moe", 0) == 0) expected.push_back("short_conv");
  // The models whose mixers begin with the attention norm and their first products as one op; the others
  // group their products apart.
  const bool norms_in_products =
      name.rfind("lfm2moe", 0) == 0 || name == "qwen3moe-tiny" || name == "hy_v3-tiny";
  expected.push_back(norms_in_products ? "norm_matmul_many" : "matmul_many");
  if (name == "gpt-oss-tiny") expected.push_back("add_bias_rows");
  expected.push_back("routed_ffn_add");  // the decode steps (the prompt chunks of 16 take the grouped ffn)
  expected.push_back("upload");          // token ids, positions, the experts' row lists
  expected.push_back("download");        // routing ids, logits
  for (const auto& op : expected)
    EXPECT_GT(forwarding->calls[op], 0) << op << " never went through the interface";
  for (const auto& [op, n] : forwarding->foreign)
    ADD_FAILURE() << op << " was handed " << n << " operands outside the backend's memory";
}

INSTANTIATE_TEST_SUITE_P(Golden, SecondBackend,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace df::models
