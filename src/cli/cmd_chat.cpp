// `diskformer chat`: a multi-turn conversation on the terminal. The conversation is kept (the session reuses
// the cached prefix between turns), reasoning is shown apart from the answer, /reset and /exit are commands.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/chat_prompt.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"

namespace df::cli {
namespace {

struct ChatFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string system;
  int n_predict = 1024;
  bool stats = false, verbose_prompt = false;
};

void chat(const ChatFlags& f) {
  ModelFlags model_flags = f.model;
  model_flags.prompt_snapshot = true;  // each turn resumes after the previous turn's prompt
  OpenedModel m = open_from_flags(model_flags);
  const auto& info = m.model->info();
  const auto& tokenizer = *m.tokenizer;
  const ChatPromptBuilder prompts(tokenizer, m.chat_template);  // parsed once, rendered every turn
  auto session_ptr = make_session(m, m.n_ctx);
  Session& session = *session_ptr;
  Sampler sampler(info.n_vocab, f.sampling.resolve());
  const bool tty_in = ::isatty(STDIN_FILENO), tty_out = ::isatty(STDOUT_FILENO);
  const char* dim = tty_out ? "\x1b[2m" : "";
  const char* plain = tty_out ? "\x1b[0m" : "";

  std::vector<ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  const size_t first_turn = messages.size();
  std::fprintf(stderr, "%s: %s, %d layers, context %d. /reset clears the conversation, /exit quits.\n",
               info.name.empty() ? "model" : info.name.c_str(), info.arch.c_str(), info.n_layer,
               session.n_ctx());
  std::string line;
  while (true) {
    if (tty_in) std::fputs("> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(first_turn);
      session.reset();
      std::puts("(conversation cleared)");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    ChatPrompt prompt;
    try {
      prompt = prompts.build(messages);
    } catch (const Error& e) {
      messages.pop_back();
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    if (static_cast<int>(prompt.ids.size()) >= session.n_ctx()) {
      messages.pop_back();
      std::fprintf(
          stderr,
          "error: the conversation (%zu tokens) no longer fits the context (%d): /reset or raise -c\n",
          prompt.ids.size(), session.n_ctx());
      continue;
    }
    if (f.verbose_prompt) print_prompt_ids(prompt.ids);
    bool reasoning = prompt.opens_reasoning;
    std::string reply = reasoning ? "<think>" : "";
    if (reasoning) std::fputs(dim, stdout);
    tok::StreamDecoder decoder(tokenizer);
    GenerateOptions go;
    go.n_predict = f.n_predict;
    go.is_stop = [&](int32_t t) { return tokenizer.is_eog(t); };
    go.on_token = [&](int32_t t) {
      const std::string& text = tokenizer.token_text(t);
      if (text == "<think>" && !reasoning) {
        reasoning = true;
        reply += text;
        std::fputs(dim, stdout);
        return true;
      }
      if (text == "</think>" && reasoning) {
        reasoning = false;
        reply += text;
        std::fputs((decoder.flush() + plain + "\n").c_str(), stdout);
        return true;
      }
      std::string piece = decoder.push(t);
      reply += tokenizer.token_to_piece(t, false);
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
    GenerationResult r = generate(session, sampler, prompt.ids, go);
    std::fputs((decoder.flush() + plain + "\n").c_str(), stdout);
    messages.push_back({"assistant", reply});
    if (f.stats) {
      const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;
      std::fprintf(stderr, "[prompt %d new tokens (%d reused) %.2f tok/s, decode %.2f tok/s, %s]\n",
                   r.prompt_tokens, session.stats().tokens_reused,
                   r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0.0,
                   r.decode_seconds > 0 ? static_cast<double>(decoded) / r.decode_seconds : 0.0,
                   stop_reason_name(r.reason));
    }
  }
  m.finish_recording();
}

}  // namespace

void register_chat(CLI::App& app) {
  auto flags = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand("chat", "multi-turn chat on the terminal");
  flags->model.add(cmd);
  flags->sampling.add(cmd);
  cmd->add_option("--system", flags->system, "system message");
  cmd->add_option("-n,--n-predict", flags->n_predict, "most tokens per reply")->capture_default_str();
  cmd->add_flag("--stats", flags->stats, "print timings after each reply");
  cmd->add_flag("--verbose-prompt", flags->verbose_prompt, "print each turn's prompt token ids to stderr");
  cmd->callback([flags] { chat(*flags); });
}

}  // namespace df::cli
