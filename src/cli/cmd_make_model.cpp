// `diskformer make-model`: writes a synthetic random-weight MoE GGUF with the real tensor names, shapes,
// types and keys of lfm2moe, qwen3moe, hy_v3, gemma4 or qwen35moe (src/synth/), from a preset and per-field
// overrides.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "synth/writer.h"
#include "util/comma_list.h"
#include "util/error.h"

namespace df::cli {

namespace {

namespace syn = df::synth;

struct MakeModelArgs {
  std::string arch = "lfm2moe", preset = "tiny", out, name, attn_layers, global_layers;
  std::string qtype, expert_type, embd_type, output_type;
  uint64_t seed = 1;
  int threads = 0;
  bool quiet = false;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, experts = 0, topk = 0, expert_ff = 0;
  int dense_ff = 0, vocab = 0, ctx = 0, dense_lead = 0, conv_l_cache = 0, route_dims = 0, shared_ff = 0;
  float expert_scale = 0, softcap = 0;
  int attn_interval = 0, rope_dims = 0, ssm_k_heads = 0, ssm_v_heads = 0, ssm_head_dim = 0, conv_kernel = 0;
  std::string rope_sections;
  int window = 0, head_dim_global = 0, kv_heads_global = 0;
  float rope_theta = 0, rms_eps = 0, embd_std = 0, logit_std = 0, block_gain = 0, router_std = 0,
        bias_std = 0;
  std::map<std::string, CLI::Option*> opts;  // long flag name -> option, to know which were given

  bool given(const std::string& flag) const {
    auto it = opts.find(flag);
    return it != opts.end() && it->second->count() > 0;
  }
};

std::vector<int> parse_layer_list(const std::string& text, const char* flag = "--attn-layers") {
  std::vector<int> out;
  if (text.empty() || text == "none") return out;
  for (const std::string& item : comma_items(text)) {
    int v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      fail("{} '{}': '{}' is not a layer index (expected e.g. 2,5 or none)", flag, text, item);
    out.push_back(v);
  }
  return out;
}

GgmlType parse_type(const std::string& text, const char* flag) {
  auto t = ggml_type_from_name(text);
  if (!t) fail("{} '{}': unknown tensor type (e.g. Q4_0, Q8_0, Q6_K, F16)", flag, text);
  return *t;
}

syn::Config build_config(const MakeModelArgs& a) {
  const syn::Arch arch = syn::arch_from_name(a.arch);
  syn::Config c = syn::preset(arch, a.preset);
  syn::Shape& s = c.shape;
  syn::Numerics& n = c.numerics;
  const bool lfm2 = arch == syn::Arch::lfm2moe, hy = arch == syn::Arch::hy_v3,
             gemma = arch == syn::Arch::gemma4, q35 = arch == syn::Arch::qwen35moe;
  c.seed = a.seed;
  for (const char* f : {"--layers",          "--hidden",          "--heads",         "--kv-heads",
                        "--head-dim",        "--experts",         "--topk",          "--expert-ff",
                        "--dense-ff",        "--vocab",           "--dense-lead",    "--attn-layers",
                        "--shared-ff",       "--expert-scale",    "--global-layers", "--window",
                        "--head-dim-global", "--kv-heads-global", "--attn-interval", "--rope-dims",
                        "--rope-sections",   "--ssm-k-heads",     "--ssm-v-heads",   "--ssm-head-dim",
                        "--conv-kernel"})
    if (a.given(f)) c.name = fmt::format("{}-custom", a.arch);  // no longer the preset's shape
  if (a.given("--name")) c.name = a.name;
  if (a.given("--layers")) s.n_layer = a.layers;
  if (a.given("--hidden")) s.n_embd = a.hidden;
  if (a.given("--heads")) s.n_head = a.heads;
  if (a.given("--kv-heads")) s.n_head_kv = a.kv_heads;
  if (a.given("--experts")) s.n_expert = a.experts;
  if (a.given("--topk")) s.n_expert_used = a.topk;
  if (a.given("--expert-ff")) s.n_ff_exp = a.expert_ff;
  if (a.given("--dense-ff")) s.n_ff = a.dense_ff;
  if (a.given("--vocab")) s.n_vocab = a.vocab;
  if (a.given("--ctx")) s.n_ctx_train = a.ctx;
  if (a.given("--rope-theta")) s.rope_theta = a.rope_theta;
  if (a.given("--rms-eps")) s.rms_eps = a.rms_eps;
  if (a.given("--head-dim")) {
    s.head_dim = a.head_dim;
  } else if (lfm2 && s.n_head > 0) {
    s.head_dim =
        s.n_embd / s.n_head;  // lfm2moe derives it; validate() rejects a hidden size heads do not divide
  }
  if ((a.given("--attn-layers") || a.given("--conv-l-cache")) && !lfm2)
    fail("--attn-layers and --conv-l-cache apply to --arch lfm2moe only");
  if (a.given("--dense-lead") && !lfm2 && !hy && !gemma)
    fail("--dense-lead applies to --arch lfm2moe, hy_v3 and gemma4 only");
  for (const char* f : {"--global-layers", "--window", "--head-dim-global", "--kv-heads-global", "--softcap"})
    if (a.given(f) && !gemma) fail("{} applies to --arch gemma4 only", f);
  if (a.given("--global-layers")) s.global_layers = parse_layer_list(a.global_layers, "--global-layers");
  if (a.given("--window")) s.n_swa = a.window;
  if (a.given("--head-dim-global")) s.head_dim_global = a.head_dim_global;
  if (a.given("--kv-heads-global")) s.n_head_kv_global = a.kv_heads_global;
  if (a.given("--softcap")) s.logit_softcap = a.softcap;
  if (a.given("--shared-ff") && !hy && !q35) fail("--shared-ff applies to --arch hy_v3 and qwen35moe only");
  if (a.given("--expert-scale") && !hy) fail("--expert-scale applies to --arch hy_v3 only");
  for (const char* f : {"--attn-interval", "--rope-dims", "--rope-sections", "--ssm-k-heads", "--ssm-v-heads",
                        "--ssm-head-dim", "--conv-kernel"})
    if (a.given(f) && !q35) fail("{} applies to --arch qwen35moe only", f);
  if (a.given("--attn-interval")) s.full_attn_interval = a.attn_interval;
  if (a.given("--rope-dims")) s.n_rot = a.rope_dims;
  if (a.given("--rope-sections")) s.rope_sections = parse_layer_list(a.rope_sections, "--rope-sections");
  if (a.given("--ssm-k-heads")) s.dn_k_heads = a.ssm_k_heads;
  if (a.given("--ssm-v-heads")) s.dn_v_heads = a.ssm_v_heads;
  if (a.given("--ssm-head-dim")) s.dn_head_dim = a.ssm_head_dim;
  if (a.given("--conv-kernel")) s.ssm_conv_kernel = a.conv_kernel;
  if (a.given("--shared-ff")) s.n_ff_shexp = a.shared_ff;
  if (a.given("--expert-scale")) s.expert_weights_scale = a.expert_scale;
  if (a.given("--dense-lead")) s.n_dense_lead = a.dense_lead;
  if (a.given("--conv-l-cache")) s.conv_l_cache = a.conv_l_cache;
  if (a.given("--attn-layers")) {
    s.attn_layers = parse_layer_list(a.attn_layers);
  } else if (lfm2 && a.given("--layers")) {
    for (int il : s.attn_layers)
      if (il >= s.n_layer)
        fail("--layers {}: the preset's attention layers ({}) do not all exist; give --attn-layers too",
             s.n_layer, fmt::join(s.attn_layers, ","));
  }
  if (a.given("--qtype")) {
    c.types.matmul = parse_type(a.qtype, "--qtype");
    c.types.experts = c.types.matmul;
    if (!lfm2) c.types.token_embd = c.types.matmul;  // qwen3moe files store the embedding like the matmuls
    if (hy) c.types.output = c.types.matmul;         // and hy_v3 files the head too
  }
  if (a.given("--expert-type")) c.types.experts = parse_type(a.expert_type, "--expert-type");
  if (a.given("--embd-type")) c.types.token_embd = parse_type(a.embd_type, "--embd-type");
  if (a.given("--output-type")) {
    if (lfm2 || gemma)
      fail("--output-type: {} has no output tensor (the head is tied to token_embd, see --embd-type)",
           a.arch);
    c.types.output = parse_type(a.output_type, "--output-type");
  }
  if (a.given("--embd-std")) n.embd_std = a.embd_std;
  if (a.given("--logit-std")) n.logit_std = a.logit_std;
  if (a.given("--block-gain")) n.block_gain = a.block_gain;
  if (a.given("--router-std")) n.router_std = a.router_std;
  if (a.given("--bias-std")) n.bias_std = a.bias_std;
  if (a.given("--route-dims")) n.route_dims = a.route_dims;
  syn::validate(c);
  return c;
}

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", double(b) / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", double(b) / double(uint64_t{1} << 20));
  return fmt::format("{} bytes", b);
}

void run_make_model(const MakeModelArgs& a) {
  const syn::Config c = build_config(a);
  const syn::Shape& s = c.shape;
  syn::WriteOptions opt;
  opt.threads = a.threads;
  const bool tty = !a.quiet && isatty(STDERR_FILENO);
  int shown = -1;  // last percentage printed: one line update per percent
  if (tty) {
    opt.progress = [&](uint64_t done, uint64_t total) {
      const int pct = total ? static_cast<int>(100 * done / total) : 100;
      if (pct == shown) return;
      shown = pct;
      fmt::print(stderr, "\rwriting {}: {:3d}% ({} of {})   ", a.out, pct, human_bytes(done),
                 human_bytes(total));
      std::fflush(stderr);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  const syn::WriteSummary sum = syn::write_model(c, a.out, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) fmt::print(stderr, "\n");
  if (a.quiet) return;
  fmt::print("wrote {}: {} '{}', seed {}, {} layers, hidden {}, {} experts top-{}, expert ff {}, vocab {}\n",
             a.out, syn::arch_name(c.arch), c.name, c.seed, s.n_layer, s.n_embd, s.n_expert, s.n_expert_used,
             s.n_ff_exp, s.n_vocab);
  if (c.arch == syn::Arch::lfm2moe)
    fmt::print("  attention layers [{}], {} leading dense layers (ff {})\n", fmt::join(s.attn_layers, ", "),
               s.n_dense_lead, s.n_ff);
  if (c.arch == syn::Arch::gemma4)
    fmt::print(
        "  global layers [{}] (head dim {}, {} KV heads), the others slide over {} positions; dense ff {}\n",
        fmt::join(s.global_layers, ", "), s.head_dim_global, s.n_head_kv_global, s.n_swa, s.n_ff);
  if (c.arch == syn::Arch::qwen35moe)
    fmt::print(
        "  every {}th layer attends ({} of {} head dims rotated), the others are delta-net layers ({} key / "
        "{} "
        "value heads of {}, conv {} taps); shared expert ff {}\n",
        s.full_attn_interval, s.n_rot, s.head_dim, s.dn_k_heads, s.dn_v_heads, s.dn_head_dim,
        s.ssm_conv_kernel, s.n_ff_shexp);
  if (c.arch == syn::Arch::hy_v3)
    fmt::print("  {} leading dense layers (ff {}), shared expert ff {}, expert weights scale {}\n",
               s.n_dense_lead, s.n_ff, s.n_ff_shexp, s.expert_weights_scale);
  fmt::print("  types: matmul {}, experts {}, token_embd {}{}; {} tensors, {} of tensor data in {:.1f} s\n",
             ggml_type_name(c.types.matmul), ggml_type_name(c.types.experts),
             ggml_type_name(c.types.token_embd),
             c.arch == syn::Arch::qwen3moe || c.arch == syn::Arch::hy_v3 || c.arch == syn::Arch::qwen35moe
                 ? fmt::format(", output {}", ggml_type_name(c.types.output))
                 : "",
             sum.n_tensors, human_bytes(sum.tensor_bytes), secs);
}

}  // namespace

void register_make_model(CLI::App& app) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* sub = app.add_subcommand("make-model",
                                     "Write a synthetic random-weight MoE model (GGUF) with the real tensor "
                                     "names, shapes, types and keys of its "
                                     "architecture. The same arguments and seed give the same bytes.");
  MakeModelArgs& a = *args;
  const auto opt = [&](const std::string& flag, auto& var, const std::string& help) {
    a.opts[flag] = sub->add_option(flag, var, help);
  };
  sub->add_option("--arch", a.arch, "lfm2moe, qwen3moe, hy_v3, gemma4 or qwen35moe")->capture_default_str();
  sub->add_option(
         "--preset", a.preset,
         "tiny (the golden fixture's shape), small (~0.3 GB, for benchmarks), lfm2-24b (lfm2moe: the real "
         "LFM2.5-24B-A2B hyper-parameters, ~13.5 GB), qwen3-30b (qwen3moe: Qwen3-30B-A3B, ~16 GB) or "
         "hy-v3-30b (hy_v3: a 48-layer 30B-A3B shape, Q8_0, ~31 GB) or gemma4-26b (gemma4: Gemma 4 "
         "26B-A4B, ~14 GB) or qwen35-35b (qwen35moe: Qwen3.5-35B-A3B, Q4_0, ~19 GB)")
      ->capture_default_str();
  sub->add_option("--seed", a.seed, "seed of the random weights")->capture_default_str();
  sub->add_option("-o,--out", a.out, "output GGUF file (written to a temporary name, then renamed)")
      ->required();
  sub->add_option("--threads", a.threads, "quantization threads (0: all cores, at most 16)")
      ->capture_default_str();
  sub->add_flag("-q,--quiet", a.quiet, "print nothing");
  opt("--name", a.name, "general.name (default: from the preset)");
  opt("--layers", a.layers, "number of layers");
  opt("--hidden", a.hidden, "hidden size (embedding length)");
  opt("--heads", a.heads, "attention query heads");
  opt("--kv-heads", a.kv_heads, "attention KV heads");
  opt("--head-dim", a.head_dim, "head dim (qwen3moe; lfm2moe's is hidden / heads)");
  opt("--experts", a.experts, "routed experts per MoE layer");
  opt("--topk", a.topk, "experts used per token");
  opt("--expert-ff", a.expert_ff, "expert feed-forward width");
  opt("--dense-ff", a.dense_ff,
      "dense feed-forward width (lfm2moe leading layers; qwen3moe feed_forward_length)");
  opt("--vocab", a.vocab, "vocabulary size");
  opt("--ctx", a.ctx, "context_length key");
  opt("--rope-theta", a.rope_theta, "RoPE base");
  opt("--rms-eps", a.rms_eps, "RMS norm epsilon");
  opt("--dense-lead", a.dense_lead, "lfm2moe, hy_v3: leading dense-FFN layers");
  opt("--shared-ff", a.shared_ff, "hy_v3, qwen35moe: the shared expert's feed-forward width");
  opt("--expert-scale", a.expert_scale, "hy_v3: expert_weights_scale (0: none)");
  opt("--global-layers", a.global_layers, "gemma4: comma-separated full-attention layers (or none)");
  opt("--window", a.window, "gemma4: the sliding layers' window");
  opt("--head-dim-global", a.head_dim_global, "gemma4: the global layers' head size");
  opt("--kv-heads-global", a.kv_heads_global, "gemma4: the global layers' KV heads");
  opt("--softcap", a.softcap, "gemma4: final logit soft-capping (0: none)");
  opt("--attn-layers", a.attn_layers,
      "lfm2moe: comma-separated attention layer indices (or none); others are conv");
  opt("--conv-l-cache", a.conv_l_cache, "lfm2moe: short-conv taps");
  opt("--attn-interval", a.attn_interval,
      "qwen35moe: every this-many-th layer attends, the others are delta-net");
  opt("--rope-dims", a.rope_dims, "qwen35moe: rotated dims of each attention head");
  opt("--rope-sections", a.rope_sections, "qwen35moe: the 4 IMRoPE sections, e.g. 11,11,10,0");
  opt("--ssm-k-heads", a.ssm_k_heads, "qwen35moe: delta-net query/key heads (ssm.group_count)");
  opt("--ssm-v-heads", a.ssm_v_heads, "qwen35moe: delta-net value heads (ssm.time_step_rank)");
  opt("--ssm-head-dim", a.ssm_head_dim, "qwen35moe: delta-net head size (ssm.state_size)");
  opt("--conv-kernel", a.conv_kernel, "qwen35moe: delta-net conv taps (ssm.conv_kernel)");
  opt("--qtype", a.qtype, "type of the matmul and expert weights (qwen3moe: and of token_embd)");
  opt("--expert-type", a.expert_type, "type of the expert weights");
  opt("--embd-type", a.embd_type, "type of token_embd (lfm2moe: also the tied head)");
  opt("--output-type", a.output_type, "qwen3moe, hy_v3: type of the output head");
  opt("--embd-std", a.embd_std, "numerics: std of the token embedding (0.25)");
  opt("--logit-std", a.logit_std, "numerics: target std of the logits (12)");
  opt("--block-gain", a.block_gain, "numerics: RMS each block adds to the residual stream (1)");
  opt("--router-std", a.router_std, "numerics: target std of the router logits (1.5)");
  opt("--bias-std", a.bias_std, "numerics: std of the lfm2moe expert selection bias (0.02)");
  opt("--route-dims", a.route_dims, "numerics: hidden dims reserved for routing (16; 0 disables)");
  sub->callback([args] { run_make_model(*args); });
}

}  // namespace df::cli
