// `diskformer make-model` through the binary: same arguments and seed give the same sha256, flags reach the
// file, the result passes inspect, and invalid flags exit non-zero with a message naming the flag, leaving no
// file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "gguf/gguf.h"

namespace fs = std::filesystem;
using df::testing::run_cli;
using df::testing::run_cli_stdout;

namespace {

std::string tmp(const std::string& name) {
  fs::create_directories(DF_TEST_TMP);
  return std::string(DF_TEST_TMP) + "/cli_make_model_" + name;
}

std::string sha256_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0)
    EVP_DigestUpdate(ctx, buf.data(), size_t(f.gcount()));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace

TEST(CliMakeModel, SameSeedSameSha256OtherSeedOtherFile) {
  const std::string a = tmp("a.gguf"), b = tmp("b.gguf"), c = tmp("c.gguf");
  fs::remove(a), fs::remove(b), fs::remove(c);
  auto r = run_cli("make-model --arch qwen3moe --preset tiny --seed 5 -o '" + a + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("qwen3moe"), std::string::npos) << r.out;
  r = run_cli("make-model --arch qwen3moe --seed 5 --threads 1 --out '" + b + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_cli("make-model --arch qwen3moe --seed 6 -q -o '" + c + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(r.out.empty()) << r.out;  // --quiet
  const std::string sa = sha256_of(a);
  EXPECT_EQ(sa.size(), 64u);
  EXPECT_EQ(sa, sha256_of(b));
  EXPECT_NE(sa, sha256_of(c));
  EXPECT_EQ(fs::file_size(a), fs::file_size(c));
}

TEST(CliMakeModel, FlagsReachTheFileAndInspectReadsIt) {
  const std::string p = tmp("custom.gguf");
  auto r = run_cli(
      "make-model --arch lfm2moe --layers 5 --hidden 512 --heads 8 --kv-heads 4 --dense-lead 1 --attn-layers "
      "1,4 "
      "--experts 8 --topk 2 --expert-ff 64 --dense-ff 256 --vocab 1000 --ctx 2048 --rope-theta 10000 --qtype "
      "Q8_0 "
      "--embd-type Q8_0 --route-dims 8 --seed 3 -o '" +
      p + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  const df::gguf::File f = df::gguf::File::open(p);
  EXPECT_EQ(f.require_int("lfm2moe.block_count"), 5);
  EXPECT_EQ(f.require_int("lfm2moe.embedding_length"), 512);
  EXPECT_EQ(f.require_int("lfm2moe.expert_count"), 8);
  EXPECT_EQ(f.require_int("lfm2moe.expert_used_count"), 2);
  EXPECT_EQ(f.require_int("lfm2moe.leading_dense_block_count"), 1);
  EXPECT_EQ(f.require_int("lfm2moe.context_length"), 2048);
  EXPECT_FLOAT_EQ(float(f.require_float("lfm2moe.rope.freq_base")), 10000.0f);
  EXPECT_EQ(f.require_int("general.file_type"), 7);  // MOSTLY_Q8_0
  const auto& kv = f.require("lfm2moe.attention.head_count_kv").arr;
  ASSERT_EQ(kv.size(), 5u);
  EXPECT_EQ(kv[1].as_int(), 4);
  EXPECT_EQ(kv[2].as_int(), 0);
  EXPECT_EQ(kv[4].as_int(), 4);
  EXPECT_EQ(f.require("tokenizer.ggml.tokens").arr.size(), 1000u);
  EXPECT_EQ(f.require_tensor("blk.1.attn_k.weight").ne[1], 4 * 64);
  EXPECT_EQ(f.require_tensor("blk.0.ffn_down.weight").ne[0], 256);
  EXPECT_EQ(f.require_tensor("blk.3.ffn_gate_exps.weight").type, df::GgmlType::Q8_0);
  EXPECT_EQ(f.require_tensor("token_embd.weight").type, df::GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);  // dense lead layer

  const auto j = run_cli_stdout("inspect --json '" + p + "'");
  ASSERT_EQ(j.status, 0) << j.out;
  const auto report = nlohmann::json::parse(j.out);
  EXPECT_EQ(report["memory"]["n_moe_layers"], 4);
  EXPECT_EQ(report["memory"]["n_expert"], 8);
  EXPECT_EQ(report["memory"]["n_expert_used"], 2);
}

// hy_v3's own flags reach the keys and tensors llama.cpp reads: the dense layers (no router), the shared
// expert's width, the expert weight scale, and --qtype for every matrix including the head.
TEST(CliMakeModel, HyV3FlagsReachTheFile) {
  const std::string p = tmp("hy.gguf");
  auto r = run_cli(
      "make-model --arch hy_v3 --layers 5 --dense-lead 2 --shared-ff 192 --expert-scale 1.5 --qtype Q4_0 "
      "--experts 8 --topk 2 -o '" +
      p + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 leading dense layers (ff 512), shared expert ff 192"), std::string::npos) << r.out;
  const df::gguf::File f = df::gguf::File::open(p);
  EXPECT_EQ(f.require_string("general.architecture"), "hy_v3");
  EXPECT_EQ(f.require_int("hy_v3.expert_shared_feed_forward_length"), 192);
  EXPECT_FLOAT_EQ(float(f.require_float("hy_v3.expert_weights_scale")), 1.5f);
  EXPECT_EQ(f.require_int("hy_v3.expert_gating_func"), 2);
  EXPECT_TRUE(f.require("hy_v3.expert_weights_norm").as_bool());
  EXPECT_EQ(f.require_string("tokenizer.ggml.pre"), "hunyuan-dense");
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate_inp.weight"), nullptr);  // dense
  EXPECT_NE(f.find_tensor("blk.2.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(f.require_tensor("blk.2.exp_probs_b").ne[0], 8);
  EXPECT_EQ(f.require_tensor("blk.4.ffn_down_shexp.weight").ne[0], 192);
  for (const char* t : {"blk.3.ffn_up_exps.weight", "blk.3.ffn_gate_shexp.weight", "output.weight",
                        "token_embd.weight", "blk.0.ffn_up.weight"})
    EXPECT_EQ(f.require_tensor(t).type, df::GgmlType::Q4_0) << t;
}

// gemma4's own flags reach the keys llama.cpp reads: which layers are global, their head size and KV heads,
// the window, the soft-capping; global layers carry rope_freqs and no attn_v, experts are fused.
TEST(CliMakeModel, Gemma4FlagsReachTheFile) {
  const std::string p = tmp("gemma4.gguf");
  auto r = run_cli(
      "make-model --arch gemma4 --layers 6 --global-layers 1,4 --window 8 --head-dim-global 256 "
      "--kv-heads-global 2 --softcap 20 -o '" +
      p + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  const df::gguf::File f = df::gguf::File::open(p);
  EXPECT_EQ(f.require_int("gemma4.attention.sliding_window"), 8);
  EXPECT_EQ(f.require_int("gemma4.attention.key_length"), 256);
  EXPECT_EQ(f.require_int("gemma4.attention.key_length_swa"), 64);
  EXPECT_FLOAT_EQ(float(f.require_float("gemma4.final_logit_softcapping")), 20.0f);
  const auto& sliding = f.require("gemma4.attention.sliding_window_pattern").arr;
  ASSERT_EQ(sliding.size(), 6u);
  EXPECT_FALSE(sliding[1].as_bool());
  EXPECT_TRUE(sliding[2].as_bool());
  EXPECT_FALSE(sliding[4].as_bool());
  EXPECT_EQ(f.require("gemma4.attention.head_count_kv").arr[4].as_int(), 2);
  EXPECT_EQ(f.require_tensor("rope_freqs.weight").ne[0], 128);
  EXPECT_EQ(f.find_tensor("blk.4.attn_v.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.3.attn_v.weight"), nullptr);
  EXPECT_EQ(f.require_tensor("blk.4.attn_k.weight").ne[1], 2 * 256);
  EXPECT_EQ(f.require_tensor("blk.2.ffn_gate_up_exps.weight").ne[1], 2 * 128);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied to token_embd
  EXPECT_EQ(f.require_string("tokenizer.ggml.model"), "gemma4");
}

TEST(CliMakeModel, InvalidFlagsFailNamingTheFlagAndWriteNothing) {
  const std::string p = tmp("invalid.gguf");
  fs::remove(p);
  const std::pair<const char*, const char*> cases[] = {
      {"--arch llama", "--arch"},
      {"--preset huge", "--preset"},
      {"--arch qwen3moe --preset lfm2-24b", "--preset"},
      {"--hidden 272", "--hidden"},
      {"--hidden 320", "Q6_K"},
      {"--heads 3", "--heads"},
      {"--kv-heads 3", "--kv-heads"},
      {"--topk 17", "--topk"},
      {"--expert-ff 100", "--expert-ff"},
      {"--layers 4", "--attn-layers"},
      {"--attn-layers 2,x", "--attn-layers"},
      {"--attn-layers 9", "--attn-layers"},
      {"--qtype Q9_9", "--qtype"},
      {"--qtype Q8_K", "--qtype"},
      {"--output-type Q8_0", "--output-type"},
      {"--arch qwen3moe --attn-layers 1", "lfm2moe only"},
      {"--arch qwen3moe --dense-lead 1", "lfm2moe, hy_v3 and gemma4 only"},
      {"--arch hy_v3 --window 8", "gemma4 only"},
      {"--arch gemma4 --global-layers 4", "--global-layers"},
      {"--arch gemma4 --head-dim-global 33", "--head-dim-global"},
      {"--arch gemma4 --output-type Q8_0", "the head is tied"},
      {"--arch lfm2moe --shared-ff 128", "hy_v3 and qwen35moe only"},
      {"--arch qwen35moe --expert-scale 2", "hy_v3 only"},
      {"--arch lfm2moe --ssm-k-heads 2", "qwen35moe only"},
      {"--arch qwen35moe --ssm-v-heads 3", "not a multiple of --ssm-k-heads 2"},
      {"--arch qwen35moe --rope-sections 3,3,2", "--rope-sections needs 4 values"},
      {"--arch qwen35moe --rope-sections 8,8,8,0", "--rope-sections add up to 24"},
      {"--arch qwen35moe --rope-dims 15", "--rope-dims 15 is odd"},
      {"--arch qwen35moe --attn-interval 9", "--attn-interval"},
      {"--arch qwen35moe --conv-kernel 1", "--conv-kernel"},
      {"--arch qwen35moe --ssm-head-dim 600", "--ssm-head-dim"},
      {"--arch hy_v3 --shared-ff 100", "--shared-ff"},
      {"--arch hy_v3 --dense-lead 4", "--dense-lead"},
      {"--arch hy_v3 --expert-scale -1", "--expert-scale"},
      {"--arch hy_v3 --preset qwen3-30b", "--preset"},
      {"--vocab 100", "--vocab"},
      {"--route-dims 200", "--route-dims"},
      {"--rms-eps 0", "--rms-eps"},
      {"--layers abc", "--layers"},
  };
  for (const auto& [flags, expected] : cases) {
    SCOPED_TRACE(flags);
    const auto r = run_cli(std::string("make-model ") + flags + " -o '" + p + "'");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(p));
  }
  const auto r = run_cli("make-model --arch lfm2moe");  // no output file
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--out"), std::string::npos) << r.out;
}
