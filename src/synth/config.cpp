#include "synth/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "models/gemma4_tensors.h"
#include "models/hy_v3_tensors.h"
#include "models/lfm2moe_tensors.h"
#include "models/qwen35moe_tensors.h"
#include "models/qwen3moe_tensors.h"
#include "synth/vocab.h"
#include "util/error.h"

namespace df::synth {

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::lfm2moe:
      return models::kLfm2MoeArch;
    case Arch::qwen3moe:
      return models::kQwen3MoeArch;
    case Arch::hy_v3:
      return models::kHyV3Arch;
    case Arch::qwen35moe:
      return models::kQwen35MoeArch;
    case Arch::gemma4:
      break;
  }
  return models::kGemma4Arch;
}

Arch arch_from_name(std::string_view name) {
  if (name == models::kLfm2MoeArch) return Arch::lfm2moe;
  if (name == models::kQwen3MoeArch) return Arch::qwen3moe;
  if (name == models::kHyV3Arch) return Arch::hy_v3;
  if (name == models::kGemma4Arch) return Arch::gemma4;
  if (name == models::kQwen35MoeArch) return Arch::qwen35moe;
  fail("--arch '{}': unknown architecture (make-model writes lfm2moe, qwen3moe, hy_v3, gemma4 or qwen35moe)",
       name);
}

bool Config::is_attention_layer(int il) const {
  if (arch == Arch::qwen35moe) return (il + 1) % shape.full_attn_interval == 0;
  if (arch != Arch::lfm2moe) return true;
  return std::find(shape.attn_layers.begin(), shape.attn_layers.end(), il) != shape.attn_layers.end();
}

bool Config::is_global_layer(int il) const {
  return arch == Arch::gemma4 &&
         std::find(shape.global_layers.begin(), shape.global_layers.end(), il) != shape.global_layers.end();
}

bool Config::is_moe_layer(int il) const { return arch == Arch::qwen3moe || il >= shape.n_dense_lead; }

int Config::n_moe_layers() const {
  int n = 0;
  for (int il = 0; il < shape.n_layer; ++il) n += is_moe_layer(il) ? 1 : 0;
  return n;
}

namespace {

Config lfm2moe_preset(std::string_view name) {
  Config c;
  c.arch = Arch::lfm2moe;
  c.types = {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::Q6_K};
  Shape& s = c.shape;
  s.conv_l_cache = 3;
  s.rms_eps = 1e-5f;
  s.n_dense_lead = 2;
  if (name == "tiny") {  // the golden lfm2moe-tiny shape
    s.n_layer = 6, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff = 512, s.n_vocab = 2048;
    s.n_ctx_train = 4096, s.rope_theta = 1e6f, s.attn_layers = {2, 5};
  } else if (name ==
             "small") {  // ~0.3 GB: large enough for a real decode benchmark, small enough for CI disks
    s.n_layer = 12, s.n_embd = 1024, s.n_head = 16, s.n_head_kv = 4, s.head_dim = 64;
    s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 512, s.n_ff = 2816, s.n_vocab = 8192;
    s.n_ctx_train = 4096, s.rope_theta = 1e6f, s.attn_layers = {2, 5, 8, 11};
  } else if (name == "lfm2-24b") {
    // LFM2.5-24B-A2B (ARCHITECTURES.md 3.1). Which 10 layers attend is not published; one in four from
    // layer 2 continues the LFM2-8B-A1B pattern (2, 6, 10, ...).
    s.n_layer = 40, s.n_embd = 2048, s.n_head = 32, s.n_head_kv = 8, s.head_dim = 64;
    s.n_expert = 64, s.n_expert_used = 4, s.n_ff_exp = 1536, s.n_ff = 11776, s.n_vocab = 65536;
    s.n_ctx_train = 32768, s.rope_theta = 1e7f, s.attn_layers = {2, 6, 10, 14, 18, 22, 26, 30, 34, 38};
  } else {
    fail("--preset '{}' does not exist for lfm2moe (tiny, small, lfm2-24b)", name);
  }
  c.name = name == "lfm2-24b" ? "lfm2moe-24b-a2b-synthetic" : fmt::format("lfm2moe-{}", name);
  return c;
}

Config qwen3moe_preset(std::string_view name) {
  Config c;
  c.arch = Arch::qwen3moe;
  c.types = {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q6_K};
  Shape& s = c.shape;
  s.rms_eps = 1e-6f;
  s.rope_theta = 1e6f;
  s.n_dense_lead = 0;
  if (name == "tiny") {  // the golden qwen3moe-tiny shape
    s.n_layer = 4, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff = 512, s.n_vocab = 2048;
    s.n_ctx_train = 4096;
  } else if (name == "small") {
    s.n_layer = 12, s.n_embd = 1024, s.n_head = 16, s.n_head_kv = 4, s.head_dim = 64;
    s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 512, s.n_ff = 2048, s.n_vocab = 8192;
    s.n_ctx_train = 4096;
  } else if (name == "qwen3-30b") {  // Qwen3-30B-A3B (ARCHITECTURES.md 2.1)
    s.n_layer = 48, s.n_embd = 2048, s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128;
    s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768, s.n_ff = 6144, s.n_vocab = 151936;
    s.n_ctx_train = 40960;
  } else {
    fail("--preset '{}' does not exist for qwen3moe (tiny, small, qwen3-30b)", name);
  }
  c.name = name == "qwen3-30b" ? "qwen3moe-30b-a3b-synthetic" : fmt::format("qwen3moe-{}", name);
  return c;
}

Config hy_v3_preset(std::string_view name) {
  Config c;
  c.arch = Arch::hy_v3;
  // The files the seed engine reads: Q8_0 for every matrix (experts, shared experts, head, embedding).
  c.types = {GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0};
  Shape& s = c.shape;
  s.rms_eps = 1e-5f;
  s.n_dense_lead = 1;  // Hy3-preview: layer 0 dense (first_k_dense_replace = 1)
  s.expert_weights_scale = 2.826f;
  if (name == "tiny") {
    s.n_layer = 4, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff_shexp = 128, s.n_ff = 512;
    s.n_vocab = 2048, s.n_ctx_train = 4096, s.rope_theta = 1e6f;
  } else if (name == "small") {
    s.n_layer = 12, s.n_embd = 1024, s.n_head = 16, s.n_head_kv = 4, s.head_dim = 64;
    s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 512, s.n_ff_shexp = 512, s.n_ff = 2816;
    s.n_vocab = 8192, s.n_ctx_train = 4096, s.rope_theta = 1e6f;
  } else if (name == "hy-v3-30b") {
    // llama.cpp names a 48-layer hy_v3 "30B-A3B"; no such checkpoint is published, so the widths scale
    // Hy3-preview's (ARCHITECTURES.md 6.1) down to Qwen3-30B-A3B's sizes: ~31 GB in Q8_0.
    s.n_layer = 48, s.n_embd = 2048, s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128;
    s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768, s.n_ff_shexp = 768, s.n_ff = 6144;
    s.n_vocab = 120832, s.n_ctx_train = 262144, s.rope_theta = 11158840.0f;
  } else {
    fail("--preset '{}' does not exist for hy_v3 (tiny, small, hy-v3-30b)", name);
  }
  c.name = name == "hy-v3-30b" ? "hy_v3-30b-a3b-synthetic" : fmt::format("hy_v3-{}", name);
  return c;
}

Config gemma4_preset(std::string_view name) {
  Config c;
  c.arch = Arch::gemma4;
  // Google's QAT Q4_0 files: Q4_0 matrices and experts, a Q6_K embedding that is also the head.
  c.types = {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::Q6_K};
  Shape& s = c.shape;
  s.rms_eps = 1e-6f;
  s.n_dense_lead = 0;  // every layer has experts (26B-A4B)
  s.rope_theta = 1e4f, s.rope_theta_global = 1e6f;
  s.partial_rotary_global = 0.25f;
  s.logit_softcap = 30.0f;
  if (name == "tiny") {  // a window of 16 so that the 60- and 200-token fixtures cross it
    s.n_layer = 4, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
    s.n_head_kv_global = 1, s.head_dim_global = 128, s.global_layers = {3}, s.n_swa = 16;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff = 512, s.n_vocab = 2048;
    s.n_ctx_train = 4096;
  } else if (name == "small") {
    s.n_layer = 12, s.n_embd = 1024, s.n_head = 8, s.n_head_kv = 4, s.head_dim = 128;
    s.n_head_kv_global = 2, s.head_dim_global = 256, s.global_layers = {5, 11}, s.n_swa = 128;
    s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 512, s.n_ff = 1024, s.n_vocab = 8192;
    s.n_ctx_train = 8192;
  } else if (name == "gemma4-26b") {  // Gemma 4 26B-A4B (ARCHITECTURES.md 4.1)
    s.n_layer = 30, s.n_embd = 2816, s.n_head = 16, s.n_head_kv = 8, s.head_dim = 256;
    s.n_head_kv_global = 2, s.head_dim_global = 512, s.global_layers = {5, 11, 17, 23, 29}, s.n_swa = 1024;
    s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 704, s.n_ff = 2112, s.n_vocab = 262144;
    s.n_ctx_train = 262144;
  } else {
    fail("--preset '{}' does not exist for gemma4 (tiny, small, gemma4-26b)", name);
  }
  c.name = name == "gemma4-26b" ? "gemma4-26b-a4b-synthetic" : fmt::format("gemma4-{}", name);
  return c;
}

Config qwen35moe_preset(std::string_view name) {
  Config c;
  c.arch = Arch::qwen35moe;
  c.types = {GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q6_K};
  Shape& s = c.shape;
  s.rms_eps = 1e-6f;
  s.rope_theta = 1e7f;
  s.n_dense_lead = 0;  // every layer has experts
  s.full_attn_interval = 4;
  s.ssm_conv_kernel = 4;
  if (name == "tiny") {  // three delta-net layers, then one attention layer
    s.n_layer = 4, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_rot = 16;
    s.rope_sections = {3, 3, 2, 0};
    s.dn_k_heads = 2, s.dn_v_heads = 4, s.dn_head_dim = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff_shexp = 128, s.n_ff = 512;
    s.n_vocab = 2048, s.n_ctx_train = 4096;
  } else if (name == "small") {
    s.n_layer = 12, s.n_embd = 1024, s.n_head = 8, s.n_head_kv = 2, s.head_dim = 128, s.n_rot = 32;
    s.rope_sections = {6, 5, 5, 0};
    s.dn_k_heads = 8, s.dn_v_heads = 16, s.dn_head_dim = 128;
    s.n_expert = 64, s.n_expert_used = 8, s.n_ff_exp = 256, s.n_ff_shexp = 256, s.n_ff = 2048;
    s.n_vocab = 8192, s.n_ctx_train = 8192;
  } else if (name == "qwen35-35b") {  // Qwen3.5-35B-A3B (ARCHITECTURES.md 5.1)
    s.n_layer = 40, s.n_embd = 2048, s.n_head = 16, s.n_head_kv = 2, s.head_dim = 256, s.n_rot = 64;
    s.rope_sections = {11, 11, 10, 0};
    s.dn_k_heads = 16, s.dn_v_heads = 32, s.dn_head_dim = 128;
    s.n_expert = 256, s.n_expert_used = 8, s.n_ff_exp = 512, s.n_ff_shexp = 512, s.n_ff = 4096;
    s.n_vocab = 248320, s.n_ctx_train = 262144;
  } else {
    fail("--preset '{}' does not exist for qwen35moe (tiny, small, qwen35-35b)", name);
  }
  c.name = name == "qwen35-35b" ? "qwen35moe-35b-a3b-synthetic" : fmt::format("qwen35moe-{}", name);
  return c;
}

bool storable(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void check_type(GgmlType t, std::string_view flag) {
  if (!storable(t))
    fail("{} {}: make-model writes F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K", flag,
         ggml_type_name(t));
}

// A row of `n` values stored as `t` must hold whole blocks.
void check_row(int64_t n, GgmlType t, std::string_view what, std::string_view type_flag) {
  const uint32_t bs = ggml_traits(t).block_size;
  if (n % bs != 0)
    fail(
        "{} = {} is not a multiple of {}, the block size of {} ({}); choose a multiple of {} or another type",
        what, n, bs, ggml_type_name(t), type_flag, bs);
}

void check_range(int64_t v, int64_t lo, int64_t hi, std::string_view flag, std::string_view why = "") {
  if (v < lo || v > hi)
    fail("{} {} is out of range [{}, {}]{}{}", flag, v, lo, hi, why.empty() ? "" : ": ", why);
}

void validate_qwen35moe(const Config& c) {
  const Shape& s = c.shape;
  check_range(s.full_attn_interval, 1, s.n_layer, "--attn-interval", "at most --layers");
  check_range(s.n_rot, 2, s.head_dim, "--rope-dims", "at most --head-dim");
  if (s.n_rot % 2 != 0) fail("--rope-dims {} is odd (RoPE rotates pairs of dims)", s.n_rot);
  if (s.rope_sections.size() != 4)
    fail("--rope-sections needs 4 values (IMRoPE's t, h, w, e sections), got {}", s.rope_sections.size());
  int sections = 0;
  for (int v : s.rope_sections) {
    check_range(v, 0, s.n_rot / 2, "--rope-sections");
    sections += v;
  }
  if (sections < 1 || sections > s.n_rot / 2)
    fail("--rope-sections add up to {}: must be 1..{} (--rope-dims / 2)", sections, s.n_rot / 2);
  check_range(s.dn_k_heads, 1, 1024, "--ssm-k-heads");
  check_range(s.dn_v_heads, 1, 4096, "--ssm-v-heads");
  if (s.dn_v_heads % s.dn_k_heads != 0)
    fail("--ssm-v-heads {} is not a multiple of --ssm-k-heads {} (each value head reads one key head)",
         s.dn_v_heads, s.dn_k_heads);
  check_range(s.dn_head_dim, 2, 512, "--ssm-head-dim");
  check_range(s.ssm_conv_kernel, 2, 16, "--conv-kernel");
  check_row(int64_t{s.dn_v_heads} * s.dn_head_dim, c.types.matmul, "--ssm-v-heads x --ssm-head-dim",
            "--qtype");
  check_range(s.n_ff_shexp, 1, 1 << 20, "--shared-ff");
  check_row(s.n_ff_shexp, c.types.matmul, "--shared-ff", "--qtype");
  if (s.n_ff < 1) fail("--dense-ff {} must be positive (qwen35moe stores it as feed_forward_length)", s.n_ff);
}

}  // namespace

Config preset(Arch arch, std::string_view name) {
  switch (arch) {
    case Arch::lfm2moe:
      return lfm2moe_preset(name);
    case Arch::qwen3moe:
      return qwen3moe_preset(name);
    case Arch::hy_v3:
      return hy_v3_preset(name);
    case Arch::qwen35moe:
      return qwen35moe_preset(name);
    case Arch::gemma4:
      break;
  }
  return gemma4_preset(name);
}

std::vector<std::string> preset_names(Arch arch) {
  if (arch == Arch::lfm2moe) return {"tiny", "small", "lfm2-24b"};
  if (arch == Arch::hy_v3) return {"tiny", "small", "hy-v3-30b"};
  if (arch == Arch::gemma4) return {"tiny", "small", "gemma4-26b"};
  if (arch == Arch::qwen35moe) return {"tiny", "small", "qwen35-35b"};
  return {"tiny", "small", "qwen3-30b"};
}

void validate(const Config& c) {
  const Shape& s = c.shape;
  const Numerics& n = c.numerics;
  const bool lfm2 = c.arch == Arch::lfm2moe, hy = c.arch == Arch::hy_v3, gemma = c.arch == Arch::gemma4;
  const bool q35 = c.arch == Arch::qwen35moe;
  check_range(s.n_layer, 1, 1024, "--layers");
  check_range(s.n_embd, 32, 65536, "--hidden");
  check_range(s.n_head, 1, 1024, "--heads");
  check_range(s.n_head_kv, 1, 1024, "--kv-heads");
  check_range(s.n_expert, 1, 4096, "--experts");
  check_range(s.n_expert_used, 1, s.n_expert, "--topk", "at most --experts");
  check_range(s.n_ff_exp, 1, 1 << 20, "--expert-ff");
  check_range(s.n_ctx_train, 1, 1 << 24, "--ctx");
  check_range(s.n_vocab, min_vocab_size(c.arch), 1 << 20, "--vocab",
              "at least the special tokens and the 256 byte tokens");
  if (s.n_head % s.n_head_kv != 0)
    fail(
        "--heads {} is not a multiple of --kv-heads {} (grouped-query attention shares each KV head among a "
        "whole "
        "number of query heads)",
        s.n_head, s.n_head_kv);
  if (lfm2) {
    if (s.n_embd % s.n_head != 0)
      fail("--hidden {} is not a multiple of --heads {} (lfm2moe's head dim is hidden / heads)", s.n_embd,
           s.n_head);
    if (s.head_dim != s.n_embd / s.n_head)
      fail("--head-dim {} differs from --hidden / --heads = {} (lfm2moe has no separate head dim)",
           s.head_dim, s.n_embd / s.n_head);
  }
  check_range(s.head_dim, 2, 1024, "--head-dim");
  if (s.head_dim % 2 != 0) fail("--head-dim {} is odd (RoPE rotates pairs of dims)", s.head_dim);
  if (!(s.rope_theta > 0)) fail("--rope-theta {} must be positive", s.rope_theta);
  if (!(s.rms_eps > 0 && s.rms_eps < 1)) fail("--rms-eps {} must be in (0, 1)", s.rms_eps);

  check_type(c.types.matmul, "--qtype");
  check_type(c.types.experts, "--expert-type");
  check_type(c.types.token_embd, "--embd-type");
  if (!lfm2) check_type(c.types.output, "--output-type");
  check_row(s.n_embd, c.types.matmul, "--hidden", "--qtype");
  check_row(s.n_embd, c.types.experts, "--hidden", "--expert-type");
  check_row(s.n_embd, c.types.token_embd, "--hidden", "--embd-type");
  if (!lfm2) check_row(s.n_embd, c.types.output, "--hidden", "--output-type");
  check_row(int64_t{s.n_head} * s.head_dim, c.types.matmul, "--heads x head dim", "--qtype");
  if (q35) validate_qwen35moe(c);
  check_row(s.n_ff_exp, c.types.experts, "--expert-ff", "--expert-type");

  if (lfm2) {
    check_range(s.n_dense_lead, 0, s.n_layer - 1, "--dense-lead",
                "at most --layers - 1, so that one layer is MoE");
    if (s.n_dense_lead > 0) {
      check_range(s.n_ff, 1, 1 << 20, "--dense-ff");
      check_row(s.n_ff, c.types.matmul, "--dense-ff", "--qtype");
    }
    check_range(s.conv_l_cache, 2, 16, "--conv-l-cache");
    std::set<int> seen;
    for (int il : s.attn_layers) {
      if (il < 0 || il >= s.n_layer)
        fail("--attn-layers: layer {} does not exist (--layers {}: indices 0..{})", il, s.n_layer,
             s.n_layer - 1);
      if (!seen.insert(il).second) fail("--attn-layers: layer {} is listed twice", il);
    }
  } else if (hy) {
    check_range(s.n_dense_lead, 0, s.n_layer - 1, "--dense-lead",
                "at most --layers - 1, so that one layer is MoE");
    if (s.n_dense_lead > 0) {
      check_range(s.n_ff, 1, 1 << 20, "--dense-ff");
      check_row(s.n_ff, c.types.matmul, "--dense-ff", "--qtype");
    }
    check_range(s.n_ff_shexp, 1, 1 << 20, "--shared-ff");
    check_row(s.n_ff_shexp, c.types.matmul, "--shared-ff", "--qtype");
    if (!(s.expert_weights_scale >= 0) || !std::isfinite(s.expert_weights_scale))
      fail("--expert-scale {} must be a finite number >= 0 (0: none)", s.expert_weights_scale);
  } else if (gemma) {
    check_range(s.n_ff, 1, 1 << 20, "--dense-ff");
    check_row(s.n_ff, c.types.matmul, "--dense-ff", "--qtype");
    check_range(s.n_swa, 1, 1 << 20, "--window");
    check_range(s.n_head_kv_global, 1, 1024, "--kv-heads-global");
    if (s.n_head % s.n_head_kv_global != 0)
      fail("--heads {} is not a multiple of --kv-heads-global {}", s.n_head, s.n_head_kv_global);
    check_range(s.head_dim_global, 2, 1024, "--head-dim-global");
    if (s.head_dim_global % 2 != 0)
      fail("--head-dim-global {} is odd (RoPE rotates pairs of dims)", s.head_dim_global);
    check_row(int64_t{s.n_head} * s.head_dim_global, c.types.matmul, "--heads x global head dim", "--qtype");
    std::set<int> seen;
    for (int il : s.global_layers) {
      if (il < 0 || il >= s.n_layer)
        fail("--global-layers: layer {} does not exist (--layers {}: indices 0..{})", il, s.n_layer,
             s.n_layer - 1);
      if (!seen.insert(il).second) fail("--global-layers: layer {} is listed twice", il);
    }
    if (!(s.rope_theta_global > 0)) fail("--rope-theta-global {} must be positive", s.rope_theta_global);
    if (!(s.partial_rotary_global > 0 && s.partial_rotary_global <= 1))
      fail("--partial-rotary {} must be in (0, 1]", s.partial_rotary_global);
    if (!(s.logit_softcap >= 0) || !std::isfinite(s.logit_softcap))
      fail("--softcap {} must be a finite number >= 0 (0: none)", s.logit_softcap);
  } else if (s.n_ff < 1) {
    fail("--dense-ff {} must be positive (qwen3moe stores it as feed_forward_length)", s.n_ff);
  }

  if (!(n.embd_std > 0)) fail("--embd-std {} must be positive", n.embd_std);
  if (!(n.logit_std > 0)) fail("--logit-std {} must be positive", n.logit_std);
  if (!(n.block_gain >= 0)) fail("--block-gain {} must not be negative", n.block_gain);
  if (!(n.router_std > 0)) fail("--router-std {} must be positive", n.router_std);
  if (!(n.bias_std >= 0)) fail("--bias-std {} must not be negative", n.bias_std);
  if (n.route_dims < 0 || n.route_dims > s.n_embd / 4)
    fail("--route-dims {} is out of range [0, {}] (at most a quarter of --hidden {})", n.route_dims,
         s.n_embd / 4, s.n_embd);
}

uint32_t file_type_of(GgmlType matmul) {
  switch (matmul) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q4_1:
      return 3;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q4_K:
      return 15;  // MOSTLY_Q4_K_M
    case GgmlType::Q5_K:
      return 17;  // MOSTLY_Q5_K_M
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::BF16:
      return 32;
    default:
      fail("no llama.cpp file type for matmul type {}", ggml_type_name(matmul));
  }
}

}  // namespace df::synth
