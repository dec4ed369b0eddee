// Synthetic model writer: presets match the golden fixtures' shapes, files have the golden files' key set,
// tensor set and special tokens, output is deterministic, the vocabulary is valid BPE, the routing subspace
// is really reserved, and bad configurations are refused with the flag's name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/gemma4_tensors.h"
#include "models/hy_v3_tensors.h"
#include "models/lfm2moe_tensors.h"
#include "models/qwen3moe_tensors.h"
#include "quant/quant.h"
#include "synth/writer.h"
#include "util/error.h"

namespace fs = std::filesystem;
namespace syn = df::synth;
using df::GgmlType;
using df::gguf::File;
using df::testing::golden_json;
using df::testing::golden_path;

namespace {

std::string tmp_path(const std::string& name) {
  fs::create_directories(DF_TEST_TMP);
  return std::string(DF_TEST_TMP) + "/synthetic_" + name;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::string write(const syn::Config& c, const std::string& name, int threads = 0) {
  const std::string p = tmp_path(name);
  syn::WriteOptions opt;
  opt.threads = threads;
  syn::write_model(c, p, opt);
  return p;
}

// The config the golden README's `regenerate` command line describes for lfm2moe-medium.
syn::Config medium_config() {
  syn::Config c = syn::preset(syn::Arch::lfm2moe, "tiny");
  auto& s = c.shape;
  s.n_layer = 10, s.n_embd = 512, s.n_head = 8, s.n_head_kv = 2, s.head_dim = 64, s.n_dense_lead = 2;
  s.attn_layers = {3, 7}, s.n_expert = 24, s.n_expert_used = 4, s.n_ff_exp = 160, s.n_ff = 1024,
  s.n_vocab = 4096;
  c.seed = 11;
  c.numerics.route_dims = 32;
  return c;
}

std::string error_of(const syn::Config& c) {
  try {
    syn::validate(c);
  } catch (const df::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "invalid config accepted";
  return "";
}

// Key names and value types (element types for arrays), in file order.
std::vector<std::string> key_signature(const File& f) {
  std::vector<std::string> out;
  for (const auto& [k, v] : f.metadata())
    out.push_back(k + ":" + std::to_string(int(v.type)) + ":" +
                  (v.is_array() ? std::to_string(int(v.elem)) : ""));
  return out;
}

std::vector<std::string> tensor_signature(const File& f) {
  std::vector<std::string> out;
  for (const auto& t : f.tensors())
    out.push_back(t.name + " " + t.shape_string() + " " + std::string(df::ggml_type_name(t.type)));
  return out;
}

std::map<int64_t, std::pair<std::string, int64_t>> specials_of(const File& f) {
  std::map<int64_t, std::pair<std::string, int64_t>> out;
  const auto& tokens = f.require("tokenizer.ggml.tokens").arr;
  const auto& types = f.require("tokenizer.ggml.token_type").arr;
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i].as_int() != syn::kTokenNormal) out[int64_t(i)] = {tokens[i].s, types[i].as_int()};
  return out;
}

std::vector<float> dequantize(const File& f, const std::string& name) {
  const auto& t = f.require_tensor(name);
  std::vector<uint8_t> raw(t.nbytes);
  f.read_tensor(t, raw.data());
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  df::quant::dequantize_row(t.type, raw.data(), v.data(), t.n_elements());
  return v;
}

}  // namespace

TEST(SyntheticPreset, TinyShapesAreTheGoldenShapes) {
  for (const auto& [arch, model] :
       {std::pair{syn::Arch::lfm2moe, "lfm2moe-tiny"}, {syn::Arch::qwen3moe, "qwen3moe-tiny"}}) {
    SCOPED_TRACE(model);
    const auto g = golden_json(model)["model"];
    const auto& shape = g["shape"];
    const syn::Config c = syn::preset(arch, "tiny");
    EXPECT_EQ(c.shape.n_layer, shape["n_layer"]);
    EXPECT_EQ(c.shape.n_embd, shape["n_embd"]);
    EXPECT_EQ(c.shape.n_head, shape["n_head"]);
    EXPECT_EQ(c.shape.n_head_kv, shape["n_head_kv"]);
    EXPECT_EQ(c.shape.head_dim, shape["head_dim"]);
    EXPECT_EQ(c.shape.n_expert, shape["n_expert"]);
    EXPECT_EQ(c.shape.n_expert_used, shape["n_expert_used"]);
    EXPECT_EQ(c.shape.n_ff_exp, shape["n_ff_exp"]);
    EXPECT_EQ(c.shape.n_ff, shape["n_ff"]);
    EXPECT_EQ(c.shape.n_vocab, shape["n_vocab"]);
    EXPECT_EQ(c.shape.n_ctx_train, shape["n_ctx_train"]);
    EXPECT_FLOAT_EQ(c.shape.rope_theta, shape["rope_theta"].get<float>());
    EXPECT_FLOAT_EQ(c.shape.rms_eps, shape["rms_eps"].get<float>());
    if (arch == syn::Arch::lfm2moe) {
      EXPECT_EQ(c.shape.attn_layers, shape["attn_layers"].get<std::vector<int>>());
      EXPECT_EQ(c.shape.n_dense_lead, shape["n_dense_lead"]);
    }
    EXPECT_EQ(df::ggml_type_name(c.types.matmul), g["types"]["matmul"].get<std::string>());
    EXPECT_EQ(df::ggml_type_name(c.types.experts), g["types"]["experts"].get<std::string>());
    EXPECT_EQ(df::ggml_type_name(c.types.token_embd), g["types"]["token_embd"].get<std::string>());
    const auto& num = g["numerics"];
    EXPECT_FLOAT_EQ(c.numerics.embd_std, num["embd_std"].get<float>());
    EXPECT_FLOAT_EQ(c.numerics.logit_std, num["logit_std"].get<float>());
    EXPECT_FLOAT_EQ(c.numerics.router_std, num["router_std"].get<float>());
    EXPECT_EQ(c.numerics.route_dims, num["route_dims"]);
    EXPECT_NO_THROW(syn::validate(c));
  }
}

TEST(SyntheticPreset, EveryPresetValidatesAndLfm24bHasTheFlagshipShape) {
  for (auto arch : {syn::Arch::lfm2moe, syn::Arch::qwen3moe, syn::Arch::hy_v3, syn::Arch::gemma4})
    for (const auto& name : syn::preset_names(arch))
      EXPECT_NO_THROW(syn::validate(syn::preset(arch, name))) << name;
  const syn::Config c = syn::preset(syn::Arch::lfm2moe, "lfm2-24b");
  EXPECT_EQ(c.shape.n_layer, 40);
  EXPECT_EQ(c.shape.n_embd, 2048);
  EXPECT_EQ(c.shape.attn_layers.size(), 10u);
  EXPECT_EQ(c.shape.n_expert, 64);
  EXPECT_EQ(c.shape.n_ff_exp, 1536);
  EXPECT_EQ(c.shape.n_ff, 11776);
  EXPECT_EQ(c.shape.n_vocab, 65536);
  uint64_t bytes = 0;
  for (const auto& t : syn::plan_tensors(c)) bytes += t.spec.nbytes();
  EXPECT_GT(bytes, 13'000'000'000u);  // ~13.5 GB, like the real Q4_0 file
  EXPECT_LT(bytes, 14'500'000'000u);
  EXPECT_THROW(syn::preset(syn::Arch::qwen3moe, "lfm2-24b"), df::Error);
  EXPECT_THROW(syn::preset(syn::Arch::lfm2moe, "huge"), df::Error);
}

TEST(SyntheticFile, HasTheGoldenKeysTensorsAndSpecialTokens) {
  struct Case {
    const char* golden;
    syn::Config config;
  };
  syn::Config f16 = syn::preset(syn::Arch::lfm2moe, "tiny");
  f16.types.matmul = f16.types.experts = f16.types.token_embd = GgmlType::F16;
  const Case cases[] = {{"lfm2moe-tiny", syn::preset(syn::Arch::lfm2moe, "tiny")},
                        {"qwen3moe-tiny", syn::preset(syn::Arch::qwen3moe, "tiny")},
                        {"lfm2moe-medium", medium_config()},
                        {"lfm2moe-tiny-f16", f16}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.golden);
    const File ours = File::open(write(c.config, std::string(c.golden) + ".gguf"));
    const File ref = File::open(golden_path(std::string(c.golden) + ".gguf"));
    EXPECT_EQ(key_signature(ours), key_signature(ref));
    EXPECT_EQ(tensor_signature(ours), tensor_signature(ref));
    EXPECT_EQ(specials_of(ours), specials_of(ref));
    for (const char* k : {"general.architecture", "tokenizer.ggml.pre", "tokenizer.ggml.model"})
      EXPECT_EQ(ours.require_string(k), ref.require_string(k)) << k;
    for (const char* k : {"general.file_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.padding_token_id"})
      EXPECT_EQ(ours.require_int(k), ref.require_int(k)) << k;
    EXPECT_EQ(ours.get_bool("tokenizer.ggml.add_bos_token"), ref.get_bool("tokenizer.ggml.add_bos_token"));
    const std::string arch = ours.architecture();
    for (const auto& [k, v] : ref.metadata())
      if (k.rfind(arch + ".", 0) == 0 && !v.is_array() && v.is_int()) {
        EXPECT_EQ(ours.require_int(k), v.as_int()) << k;
      }
  }
}

// The file holds exactly the tensors the architecture's description lists for the config its loader reads
// back from the file's keys, in that order, F32 where the loader wants F32; the keys give back the shape.
TEST(SyntheticFile, HoldsExactlyWhatTheLoaderReadsBack) {
  syn::Config convs = syn::preset(syn::Arch::lfm2moe, "tiny");
  convs.shape.n_dense_lead = 0, convs.shape.attn_layers = {}, convs.shape.conv_l_cache = 4;
  syn::Config wide = syn::preset(syn::Arch::qwen3moe, "tiny");
  wide.shape.head_dim = 128, wide.shape.n_expert_used = 2;
  syn::Config hy_dense2 = syn::preset(syn::Arch::hy_v3, "tiny");
  hy_dense2.shape.n_dense_lead = 2, hy_dense2.shape.n_ff_shexp = 256,
  hy_dense2.shape.expert_weights_scale = 0;
  syn::Config gemma_two_global = syn::preset(syn::Arch::gemma4, "tiny");
  gemma_two_global.shape.n_layer = 6, gemma_two_global.shape.global_layers = {0, 4};
  gemma_two_global.shape.n_dense_lead = 1;
  int n = 0;
  for (const syn::Config& c :
       {syn::preset(syn::Arch::lfm2moe, "tiny"), syn::preset(syn::Arch::qwen3moe, "tiny"), medium_config(),
        convs, wide, syn::preset(syn::Arch::hy_v3, "tiny"), hy_dense2, syn::preset(syn::Arch::gemma4, "tiny"),
        gemma_two_global}) {
    SCOPED_TRACE(c.name + " #" + std::to_string(n));
    const File f = File::open(write(c, "readback" + std::to_string(n++) + ".gguf"));
    std::vector<df::models::TensorDesc> described;
    if (c.arch == syn::Arch::lfm2moe) {
      const auto m = df::models::lfm2moe_config(f);
      EXPECT_EQ(m.n_dense_lead, c.shape.n_dense_lead);
      EXPECT_EQ(m.l_cache, c.shape.attn_layers.size() < size_t(c.shape.n_layer) ? c.shape.conv_l_cache : 0);
      for (int il = 0; il < c.shape.n_layer; ++il) EXPECT_EQ(m.attn[size_t(il)], c.is_attention_layer(il));
      EXPECT_EQ(m.n_expert_used, c.shape.n_expert_used);
      described = df::models::lfm2moe_tensors(m);
    } else if (c.arch == syn::Arch::hy_v3) {
      const auto m = df::models::hy_v3_config(f);
      for (int il = 0; il < c.shape.n_layer; ++il) EXPECT_EQ(m.moe[size_t(il)], c.is_moe_layer(il));
      EXPECT_EQ(m.n_ff, c.shape.n_ff);
      EXPECT_EQ(m.n_ff_shexp, c.shape.n_ff_shexp);
      EXPECT_EQ(m.expert_weights_scale, c.shape.expert_weights_scale);
      EXPECT_TRUE(m.weights_norm);
      EXPECT_EQ(m.gating, df::backend::Gating::Sigmoid);
      described = df::models::hy_v3_tensors(m);
    } else if (c.arch == syn::Arch::gemma4) {
      const auto m = df::models::gemma4_config(f);
      for (int il = 0; il < c.shape.n_layer; ++il) {
        const size_t l = size_t(il);
        EXPECT_EQ(m.swa[l], !c.is_global_layer(il));
        EXPECT_EQ(m.moe[l], c.is_moe_layer(il));
        EXPECT_EQ(m.head_dim[l], c.is_global_layer(il) ? c.shape.head_dim_global : c.shape.head_dim);
        EXPECT_EQ(m.n_head_kv[l], c.is_global_layer(il) ? c.shape.n_head_kv_global : c.shape.n_head_kv);
      }
      EXPECT_EQ(m.n_swa, c.shape.n_swa);
      EXPECT_EQ(m.final_logit_softcap, c.shape.logit_softcap);
      described = df::models::gemma4_tensors(m);
    } else {
      const auto m = df::models::qwen3moe_config(f);
      EXPECT_EQ(m.head_dim, c.shape.head_dim);
      EXPECT_EQ(m.n_expert_used, c.shape.n_expert_used);
      EXPECT_EQ(m.eps, c.shape.rms_eps);
      described = df::models::qwen3moe_tensors(m);
    }
    std::vector<std::string> want, got;
    for (const auto& t : described) {
      if (t.kind == df::models::TensorKind::output && c.arch != syn::Arch::qwen3moe &&
          c.arch != syn::Arch::hy_v3)
        continue;  // lfm2moe's and gemma4's heads are tied
      // make-model writes gemma4's gate and up experts fused (as its converter), the others' separate.
      if (c.arch == syn::Arch::gemma4 ? !t.replaced_by.empty()
                                      : t.kind == df::models::TensorKind::gate_up_exps)
        continue;
      // gemma4's global layers take V from K (no attn_v).
      if (t.kind == df::models::TensorKind::attn_v && c.is_global_layer(t.layer)) continue;
      want.push_back(fmt::format("{} {{{}}}", t.name, fmt::join(t.ne, ", ")));
      if (const auto* info = f.find_tensor(t.name); info && t.role == df::models::TensorRole::vector) {
        EXPECT_EQ(info->type, GgmlType::F32) << t.name;
      }
    }
    for (const auto& t : f.tensors()) got.push_back(fmt::format("{} {}", t.name, t.shape_string()));
    EXPECT_EQ(got, want);
  }
}

TEST(SyntheticFile, SameConfigSameBytesAnyThreadCountOtherSeedOtherWeights) {
  syn::Config c = syn::preset(syn::Arch::qwen3moe, "tiny");
  c.seed = 7;
  const auto a = slurp(write(c, "det_a.gguf", 1));
  const auto b = slurp(write(c, "det_b.gguf", 3));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same config, different bytes";
  c.seed = 8;
  const std::string pc = write(c, "det_c.gguf", 2);
  const auto cbytes = slurp(pc);
  ASSERT_EQ(cbytes.size(), a.size());
  EXPECT_FALSE(a == cbytes);
  // Every tensor differs, not just the description.
  const File fa = File::open(tmp_path("det_a.gguf")), fc = File::open(pc);
  for (const auto& t : fa.tensors()) {
    std::vector<uint8_t> x(t.nbytes), y(t.nbytes);
    fa.read_tensor(t, x.data());
    fc.read_tensor(fc.require_tensor(t.name), y.data());
    EXPECT_NE(x, y) << t.name;
  }
  EXPECT_FALSE(fs::exists(pc + ".tmp"));
  for (const auto& e : fs::directory_iterator(DF_TEST_TMP)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("synthetic_det_", 0) == 0) {
      EXPECT_EQ(name.find(".tmp"), std::string::npos) << "left behind: " << name;
    }
  }
}

TEST(SyntheticWeights, RoutersReadOnlyTheRouteDimsAndNothingWritesThem) {
  const syn::Config c = syn::preset(syn::Arch::lfm2moe, "tiny");
  const File f = File::open(write(c, "route.gguf"));
  const int64_t H = c.shape.n_embd, R = c.numerics.route_dims;
  ASSERT_GT(R, 0);
  int checked = 0;
  for (const auto& t : f.tensors()) {
    const std::string& n = t.name;
    const bool router = n.ends_with("ffn_gate_inp.weight");
    const bool writes_residual = n.ends_with("attn_output.weight") || n.ends_with("out_proj.weight") ||
                                 n.ends_with("ffn_down.weight") || n.ends_with("ffn_down_exps.weight");
    if (!router && !writes_residual) continue;
    ++checked;
    const std::vector<float> w = dequantize(f, n);
    const int64_t K = t.ne[0], N = t.ne[1], slabs = t.ne[2];
    double inside = 0, outside = 0;
    for (int64_t e = 0; e < slabs; ++e)
      for (int64_t r = 0; r < N; ++r)
        for (int64_t k = 0; k < K; ++k) {
          const float v = w[size_t((e * N + r) * K + k)];
          const bool route = router ? k >= H - R : r >= H - R;
          (route ? inside : outside) += std::fabs(v);
        }
    if (router) {
      EXPECT_EQ(outside, 0.0) << n << " reads dims outside the routing subspace";
      EXPECT_GT(inside, 0.0) << n;
    } else {
      EXPECT_EQ(inside, 0.0) << n << " writes into the routing subspace";
      EXPECT_GT(outside, 0.0) << n;
    }
  }
  EXPECT_EQ(checked, 6 /*out*/ + 2 /*dense down*/ + 4 * 2 /*router + expert down*/);
}

TEST(SyntheticWeights, DistributionsFollowTheKnobs) {
  syn::Config c = syn::preset(syn::Arch::qwen3moe, "tiny");
  c.types.token_embd = GgmlType::F32;  // exact values
  const File f = File::open(write(c, "knobs.gguf"));
  const auto std_of = [](const std::vector<float>& v) {
    double s = 0, ss = 0;
    for (float x : v) s += x, ss += double(x) * x;
    const double m = s / double(v.size());
    return std::sqrt(ss / double(v.size()) - m * m);
  };
  EXPECT_NEAR(std_of(dequantize(f, "token_embd.weight")), c.numerics.embd_std, 0.01);
  // Untied head: logit std = |output row| * |normed x| = std * sqrt(H).
  EXPECT_NEAR(std_of(dequantize(f, "output.weight")) * std::sqrt(double(c.shape.n_embd)),
              c.numerics.logit_std, 0.6);
  const auto norm = dequantize(f, "blk.0.attn_norm.weight");
  double mean = 0;
  for (float x : norm) mean += x;
  EXPECT_NEAR(mean / double(norm.size()), 1.0, 0.02);
  EXPECT_GT(std_of(norm), 0.0);  // jittered, so an engine that ignores norm weights is caught
}

TEST(SyntheticVocab, IsAValidByteLevelBpeVocabulary) {
  for (auto arch : {syn::Arch::lfm2moe, syn::Arch::qwen3moe, syn::Arch::qwen35moe}) {
    SCOPED_TRACE(std::string(syn::arch_name(arch)));
    const syn::Vocab v = syn::build_vocab(arch, 3000);
    ASSERT_EQ(v.tokens.size(), 3000u);
    ASSERT_EQ(v.token_types.size(), 3000u);
    std::map<std::string, size_t> id;
    for (size_t i = 0; i < v.tokens.size(); ++i)
      EXPECT_TRUE(id.emplace(v.tokens[i], i).second) << "duplicate " << v.tokens[i];
    // The 256 byte tokens are present.
    for (int b = 0; b < 256; ++b) EXPECT_TRUE(id.count(syn::byte_token_text(uint8_t(b)))) << b;
    // Every merge joins two tokens that exist before it into a token that exists.
    std::set<std::string> known;
    for (int b = 0; b < 256; ++b) known.insert(syn::byte_token_text(uint8_t(b)));
    for (const auto& m : v.merges) {
      const size_t sp = m.find(' ', 1);
      ASSERT_NE(sp, std::string::npos) << m;
      const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
      EXPECT_TRUE(known.count(a) && known.count(b)) << "merge of unknown parts: " << m;
      EXPECT_TRUE(id.count(a + b)) << "merge result not in the vocabulary: " << m;
      known.insert(a + b);
    }
    // Every normal token beyond the bytes is the result of some merge.
    size_t normal = 0;
    for (size_t i = 0; i < v.tokens.size(); ++i) normal += v.token_types[i] == syn::kTokenNormal;
    EXPECT_EQ(known.size(), normal);
    // Common words of the corpus are single tokens.
    for (const char* w : {"\xC4\xA0"
                          "the",
                          "\xC4\xA0"
                          "and",
                          "\xC4\xA0"
                          "model",
                          "\xC4\xA0"
                          "expert",
                          "def",
                          "\xC4\xA0"
                          "return"})
      EXPECT_TRUE(id.count(w)) << w;
    EXPECT_EQ(v.tokens[v.bos_id], arch == syn::Arch::lfm2moe ? "<|startoftext|>" : "<|endoftext|>");
    EXPECT_EQ(v.tokens[v.eos_id], "<|im_end|>");
    EXPECT_NE(v.chat_template.find("<|im_start|>"), std::string::npos);
    EXPECT_EQ(v.chat_template.find("bos_token") != std::string::npos, arch == syn::Arch::lfm2moe);
  }
  EXPECT_TRUE(syn::build_vocab(syn::Arch::lfm2moe, 2048).tokens ==
              syn::build_vocab(syn::Arch::lfm2moe, 2048).tokens);
  EXPECT_THROW(syn::build_vocab(syn::Arch::lfm2moe, 200), df::Error);
}

// qwen35moe: Qwen3.5's split name, the Qwen3 added tokens closing the vocabulary in their real order, no BOS
// added, and words with combining marks learned whole (the split keeps marks inside words).
TEST(SyntheticVocab, Qwen35HasTheQwen35SplitAndTheQwenAddedTokens) {
  const syn::Vocab v = syn::build_vocab(syn::Arch::qwen35moe, 2048);
  ASSERT_EQ(v.tokens.size(), 2048u);
  EXPECT_EQ(v.pre, "qwen35");
  EXPECT_EQ(syn::min_vocab_size(syn::Arch::qwen35moe), 26 + 256);
  const std::vector<std::string> added = {
      "<|endoftext|>",  "<|im_start|>",   "<|im_end|>",      "<|object_ref_start|>", "<|object_ref_end|>",
      "<|box_start|>",  "<|box_end|>",    "<|quad_start|>",  "<|quad_end|>",         "<|vision_start|>",
      "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",   "<|video_pad|>",        "<tool_call>",
      "</tool_call>",   "<|fim_prefix|>", "<|fim_middle|>",  "<|fim_suffix|>",       "<|fim_pad|>",
      "<|repo_name|>",  "<|file_sep|>",   "<tool_response>", "</tool_response>",     "<think>",
      "</think>"};
  const size_t first = v.tokens.size() - added.size();
  for (size_t i = 0; i < added.size(); ++i) {
    EXPECT_EQ(v.tokens[first + i], added[i]) << i;
    // The converter's types: Qwen's "special" added tokens are control tokens, the others user-defined.
    EXPECT_EQ(v.token_types[first + i], i < 14 ? syn::kTokenControl : syn::kTokenUserDefined) << added[i];
  }
  for (size_t i = 0; i < first; ++i) EXPECT_EQ(v.token_types[i], syn::kTokenNormal) << i;
  EXPECT_EQ(v.tokens[v.bos_id], "<|endoftext|>");
  EXPECT_EQ(v.tokens[v.eos_id], "<|im_end|>");
  EXPECT_EQ(v.tokens[v.pad_id], "<|endoftext|>");
  EXPECT_FALSE(v.add_bos);
  EXPECT_FALSE(v.has_add_eos);
  // Byte-level tokens of words with marks (e + U+0301, Devanagari, Thai), with their leading space.
  std::set<std::string> tokens(v.tokens.begin(), v.tokens.end());
  const auto mapped = [](std::string_view text) {
    std::string out;
    for (const unsigned char b : text) out += syn::byte_token_text(b);
    return out;
  };
  for (const char* w : {" cafe\u0301", "नमस्ते", "สวัสดีครับ", " दुनिया"})
    EXPECT_TRUE(tokens.count(mapped(w))) << w;
  // The chat template opens the reasoning block in the generation prompt unless thinking is off.
  EXPECT_NE(v.chat_template.find("'<think>\\n'"), std::string::npos);
  EXPECT_NE(v.chat_template.find("'<think>\\n\\n</think>\\n\\n'"), std::string::npos);
  EXPECT_EQ(v.chat_template.find("bos_token"), std::string::npos);
  EXPECT_TRUE(syn::build_vocab(syn::Arch::qwen35moe, 2048).merges == v.merges);
  EXPECT_THROW(syn::build_vocab(syn::Arch::qwen35moe, 26 + 255), df::Error);
}

TEST(SyntheticVocab, ByteMapAndPretokenizer) {
  EXPECT_EQ(syn::byte_token_text(' '), "\xC4\xA0");   // U+0120
  EXPECT_EQ(syn::byte_token_text('\n'), "\xC4\x8A");  // U+010A
  EXPECT_EQ(syn::byte_token_text('a'), "a");
  EXPECT_EQ(syn::byte_token_text(0xAD), "\xC5\x83");  // the last unprintable byte: U+0143
  EXPECT_EQ(syn::byte_token_text(0xFF), "\xC3\xBF");
  using V = std::vector<std::string>;
  EXPECT_EQ(syn::pretokenize("Hello world", 3), (V{"Hello", " world"}));
  EXPECT_EQ(syn::pretokenize("I'm 12345 ok", 3), (V{"I", "'m", " ", "123", "45", " ok"}));
  EXPECT_EQ(syn::pretokenize("x = 42;\n\n  y", 1), (V{"x", " =", " ", "4", "2", ";\n\n", " ", " y"}));
  EXPECT_EQ(syn::pretokenize("a  \n b", 3), (V{"a", "  \n", " b"}));
}

TEST(SyntheticConfig, BadValuesAreRefusedNamingTheFlag) {
  const syn::Config tiny = syn::preset(syn::Arch::lfm2moe, "tiny");
  const auto with = [&](auto edit) {
    syn::Config c = tiny;
    edit(c);
    return error_of(c);
  };
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_embd = 272, c.shape.head_dim = 68; }).find("--hidden"),
            std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_embd = 288, c.shape.head_dim = 72; }).find("Q6_K"),
            std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_head_kv = 3; }).find("--kv-heads"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_expert_used = 17; }).find("--topk"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) {
              c.shape.attn_layers = {2, 6};
            }).find("--attn-layers"),
            std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.attn_layers = {2, 2}; }).find("twice"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_ff_exp = 100; }).find("--expert-ff"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_dense_lead = 6; }).find("--dense-lead"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.numerics.route_dims = 128; }).find("--route-dims"),
            std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.n_vocab = 100; }).find("--vocab"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.types.matmul = GgmlType::Q8_K; }).find("--qtype"), std::string::npos);
  EXPECT_NE(with([](syn::Config& c) { c.shape.head_dim = 32; }).find("--head-dim"), std::string::npos);
  EXPECT_THROW(syn::arch_from_name("llama"), df::Error);
  // write_model validates too and leaves no file behind.
  syn::Config bad = tiny;
  bad.shape.n_expert_used = 0;
  EXPECT_THROW(syn::write_model(bad, tmp_path("bad.gguf")), df::Error);
  EXPECT_FALSE(fs::exists(tmp_path("bad.gguf")));
}
