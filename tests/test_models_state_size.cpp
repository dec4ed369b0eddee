// Model::state_bytes and models::state_bytes(state_dims(file), ...) say what a state will hold without
// allocating it: the memory plan refuses a context, and sizes the expert cache, from these numbers, so they
// must equal what a real state holds after prefill batches and decode steps (on every architecture).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"
#include "models/state_size.h"

namespace df::models {
namespace {

class StateSize : public ::testing::TestWithParam<const char*> {
 protected:
  gguf::File file() const {
    return gguf::File::open(testing::golden_path(std::string(GetParam()) + ".gguf"));
  }
};

// Runs a prefill batch of n_batch tokens and one decode step, then compares with the computed size.
TEST_P(StateSize, ComputedBytesEqualARealState) {
  const gguf::File f = file();
  for (int threads : {1, 3}) {
    LoadOptions o;
    o.n_threads = threads;
    auto model = load_model(f, o);
    for (auto [n_ctx, n_batch] : {std::pair{64, 7}, std::pair{300, 32}}) {
      auto state = model->new_state(n_ctx);
      std::vector<int32_t> prompt(static_cast<size_t>(n_batch));
      for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i % 50);
      std::vector<float> logits(static_cast<size_t>(model->info().n_vocab));
      model->forward(*state, prompt, logits, false);
      const int32_t next = 3;
      model->forward(*state, std::span<const int32_t>(&next, 1), logits, false);
      EXPECT_EQ(model->state_bytes(n_ctx, n_batch), state->bytes())
          << GetParam() << " n_ctx " << n_ctx << " n_batch " << n_batch << " threads " << threads;
      // From the file alone (before loading), at least as much: the activation scratch is taken from the
      // widest matrix of the file, which the model may not quantize.
      EXPECT_GE(state_bytes(state_dims(f), n_ctx, n_batch, threads), state->bytes()) << GetParam();
    }
  }
}

TEST_P(StateSize, GrowsWithTheContextAndTheThreads) {
  const StateDims d = state_dims(file());
  EXPECT_GT(state_bytes(d, 8192, 64, 2), state_bytes(d, 4096, 64, 2));
  EXPECT_GT(state_bytes(d, 4096, 64, 2), state_bytes(d, 4096, 1, 2));
  // A context of 1e8 positions is computed, not allocated: tens of GB on even the tiny models.
  EXPECT_GT(state_bytes(d, 100000000, 64, 2), uint64_t{1} << 30);
}

INSTANTIATE_TEST_SUITE_P(Golden, StateSize,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny",
                                           "gemma4-tiny", "qwen35moe-tiny"));

TEST(StateSizeKv, IsTwoF16RowsPerPositionAndAttentionLayer) {
  StateDims d;
  d.n_layer = 6;
  d.n_kv_layers = 2;
  d.n_head_kv = 8;
  d.head_dim = 64;
  // K and V: 2 layers x 2 x 1000 positions x 8 x 64 x 2 bytes, plus one thread's attention scratch
  // (1000 + 500 + 32 floats) and the one int32 of expert_start (n_expert + 1 entries).
  EXPECT_EQ(state_bytes(d, 1000, 0, 1), uint64_t{2} * 2 * 1000 * 8 * 64 * 2 + (1000 + 500 + 32) * 4 + 4);
}

}  // namespace
}  // namespace df::models
