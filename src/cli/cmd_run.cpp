// `diskformer run`: one prompt in, generated text streamed out; or, for tests and benchmarks, ids in and ids
// out (--prompt-ids / --print-ids).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/chat_prompt.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "stream/cache_telemetry.h"
#include "tokenizer/stream_decoder.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::cli {
namespace {

struct RunFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string prompt, prompt_file, system;
  std::vector<int32_t> prompt_ids;
  int n_predict = 256;
  bool chat = false, print_ids = false, stats = false, ignore_eos = false, no_display_prompt = false;
  bool verbose_prompt = false;
  std::string dump_layers;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read prompt file '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// --dump-layers: the residual stream after every layer, one file per forward pass ("step"):
// step-NNNN.f32 = float32 [n_layer][T][n_embd], with index.json describing them.
class LayerDumper {
 public:
  LayerDumper(std::string dir, const models::ModelInfo& info) : dir_(std::move(dir)), info_(info) {
    std::filesystem::create_directories(dir_);
    capture_.want_layers = true;
  }
  models::ForwardCapture* capture() { return &capture_; }
  void write_step(int step) {
    const size_t per_token = static_cast<size_t>(info_.n_layer) * static_cast<size_t>(info_.n_embd);
    const size_t tokens = per_token ? capture_.l_out.size() / per_token : 0;
    std::string name = fmt::format("step-{:04d}.f32", step);
    AtomicFile out(dir_ + "/" + name);
    out.write(capture_.l_out.data(), capture_.l_out.size() * sizeof(float));
    out.commit();
    index_.push_back({{"step", step},
                      {"file", name},
                      {"n_layer", info_.n_layer},
                      {"n_tokens", tokens},
                      {"n_embd", info_.n_embd},
                      {"layout", "float32 [n_layer][n_tokens][n_embd]"}});
  }
  void finish() {
    AtomicFile out(dir_ + "/index.json");
    std::string s = index_.dump(2) + "\n";
    out.write(s.data(), s.size());
    out.commit();
  }

 private:
  std::string dir_;
  const models::ModelInfo& info_;
  models::ForwardCapture capture_;
  nlohmann::json index_ = nlohmann::json::array();
};

void run(const RunFlags& f) {
  int sources = !f.prompt.empty() + !f.prompt_file.empty() + !f.prompt_ids.empty();
  if (sources != 1) fail("give exactly one of -p TEXT, -f FILE or --prompt-ids IDS");
  if (f.chat && !f.prompt_ids.empty())
    fail("--chat renders text through the chat template: use -p, not --prompt-ids");
  if (f.n_predict < -1) fail("-n {} must be -1 (until the end) or at least 0", f.n_predict);

  OpenedModel m = open_from_flags(f.model);
  const auto& info = m.model->info();
  const auto& tokenizer = *m.tokenizer;

  std::vector<int32_t> prompt;
  bool in_reasoning = false;
  std::string text = f.prompt_file.empty() ? f.prompt : read_file(f.prompt_file);
  if (!f.prompt_ids.empty()) {
    prompt = f.prompt_ids;
  } else if (f.chat) {
    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back({"system", f.system});
    messages.push_back({"user", text});
    ChatPrompt cp = build_chat_prompt(tokenizer, m.chat_template, messages);
    prompt = std::move(cp.ids);
    in_reasoning = cp.opens_reasoning;
  } else {
    prompt = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  if (prompt.empty()) fail("the prompt is empty");
  if (f.verbose_prompt) print_prompt_ids(prompt);

  const int n_ctx = m.n_ctx;
  std::unique_ptr<LayerDumper> dumper;
  if (!f.dump_layers.empty()) {
    dumper = std::make_unique<LayerDumper>(f.dump_layers, info);
    m.prefill_chunk =
        std::max<int>(m.prefill_chunk, static_cast<int>(prompt.size()));  // the prompt is one step
  }
  auto session_ptr = make_session(m, n_ctx);
  Session& session = *session_ptr;
  Sampler sampler(info.n_vocab, f.sampling.resolve());

  const bool tty = ::isatty(STDOUT_FILENO);
  tok::StreamDecoder decoder(tokenizer);
  if (!f.print_ids && !f.no_display_prompt && !f.chat && f.prompt_ids.empty()) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  GenerateOptions go;
  go.n_predict = f.n_predict;
  if (!f.ignore_eos) go.is_stop = [&](int32_t t) { return tokenizer.is_eog(t); };
  go.on_token = [&](int32_t t) {
    if (f.print_ids) return true;
    std::string piece = decoder.push(t);
    if (tty && f.chat) {  // reasoning is shown dimmed, apart from the answer
      const std::string& tt = tokenizer.token_text(t);
      if (tt == "<think>") in_reasoning = true;
      if (in_reasoning) piece = "\x1b[2m" + piece + "\x1b[0m";
      if (tt == "</think>") in_reasoning = false;
    }
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    return true;
  };
  if (dumper) {
    go.capture = dumper->capture();
    go.after_forward = [&](int step) { dumper->write_step(step); };
  }
  GenerationResult r = generate(session, sampler, prompt, go);
  if (dumper) dumper->finish();
  m.finish_recording();
  if (f.print_ids) {
    std::string line;
    for (size_t i = 0; i < r.tokens.size(); ++i) line += (i ? " " : "") + std::to_string(r.tokens[i]);
    std::puts(line.c_str());
  } else {
    std::string rest = decoder.flush();
    std::fputs((rest + "\n").c_str(), stdout);
  }
  std::fflush(stdout);
  if (f.stats || !f.print_ids) {
    const double pre_tps = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
    const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;
    const double dec_tps = r.decode_seconds > 0 ? static_cast<double>(decoded) / r.decode_seconds : 0;
    std::fprintf(stderr,
                 "\nprompt: %d tokens in %.3f s (%.2f tok/s) | generated: %zu tokens, decode %.2f tok/s | "
                 "stop: %s | threads: %d, context: %d\n",
                 r.prompt_tokens, r.prefill_seconds, pre_tps, r.tokens.size(), dec_tps,
                 stop_reason_name(r.reason), m.n_threads, n_ctx);
    if (f.stats && m.tiers)
      std::fprintf(stderr, "device tier (%s; reads = copies up from RAM):\n%s",
                   m.describe_device_tiers().c_str(),
                   stream::format_telemetry_table(m.device_telemetry()).c_str());
    if (f.stats && m.cache)
      std::fprintf(stderr, "%s%s", m.tiers ? "RAM tier (reads from disk):\n" : "",
                   stream::format_telemetry_table(m.cache->telemetry()).c_str());
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  flags->model.add(cmd);
  flags->sampling.add(cmd);
  cmd->add_option("-p,--prompt", flags->prompt, "prompt text");
  cmd->add_option("-f,--file", flags->prompt_file, "read the prompt from a file");
  cmd->add_option("--prompt-ids", flags->prompt_ids, "prompt as token ids, comma-separated")->delimiter(',');
  cmd->add_option("-n,--n-predict", flags->n_predict, "tokens to generate (-1: until end of generation)")
      ->capture_default_str();
  cmd->add_flag("--chat", flags->chat, "render -p as a user message through the model's chat template");
  cmd->add_option("--system", flags->system, "system message (with --chat)");
  cmd->add_flag("--print-ids", flags->print_ids,
                "print only the generated ids, space-separated, on one line");
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "do not stop at end-of-generation tokens");
  cmd->add_flag("--no-display-prompt", flags->no_display_prompt, "do not echo the prompt");
  cmd->add_flag("--stats", flags->stats, "print timings and counters to stderr");
  cmd->add_flag("--verbose-prompt", flags->verbose_prompt, "print the prompt's token ids to stderr");
  cmd->add_option("--dump-layers", flags->dump_layers,
                  "write the residual stream after every layer of every step to DIR (float32)");
  cmd->callback([flags] { run(*flags); });
}

}  // namespace df::cli
