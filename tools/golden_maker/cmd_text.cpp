// ---------------------------------------------------------------------------------------------------------------
// `text`: tokenizer cases, chat renderings, prompt ids, model description
// ---------------------------------------------------------------------------------------------------------------

#include <cstdio>

#include "chat.h"
#include "commands.h"
#include "fixture_json.h"
#include "llama_util.h"
#include "model_description.h"

namespace golden_maker {

namespace {

std::string hex(const std::string& s) {
  std::string out;
  char b[3];
  for (unsigned char c : s) {
    snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out;
}

}  // namespace

int cmd_text(const std::string& model_path, const std::string& texts_path, const std::string& out_path) {
  const json texts = read_json(texts_path);
  ModelHolder mh;
  mh.model = load_model(model_path, /*vocab_only=*/true, true);
  const llama_vocab* vocab = llama_model_get_vocab(mh.model);
  const bool add_bos = llama_vocab_get_add_bos(vocab);
  const bool add_eos = llama_vocab_get_add_eos(vocab);
  const llama_token bos = llama_vocab_bos(vocab);
  const llama_token eos = llama_vocab_eos(vocab);

  json out;
  std::vector<int> special_ids;
  out["model"] = describe_model(model_path, vocab, special_ids);

  // --- tokenizer ---
  json tok;
  tok["source"] =
      "llama.cpp llama_tokenize(vocab, text, add_special=false, parse_special=false) -> ids; "
      "parse_special=true -> ids_parse_special (only for texts holding special-token strings); "
      "llama_detokenize(vocab, ids, remove_special, unparse_special) -> text (text_hex: its exact bytes)";
  tok["add_bos"] = add_bos;
  tok["add_eos"] = add_eos;
  tok["bos_id"] = bos;
  tok["eos_id"] = eos;
  json cases = json::array();
  for (const auto& c : texts.at("tokenizer_cases")) {
    const std::string text = c.at("text");
    json o;
    o["name"] = c.at("name");
    o["text"] = text;
    o["ids"] = ids_json(tokenize(vocab, text, false, false));
    if (c.value("parse_special", false)) {
      o["ids_parse_special"] = ids_json(tokenize(vocab, text, false, true));
    }
    cases.push_back(o);
  }
  tok["cases"] = cases;

  // detokenize cases: the ids come from recipes, since ids differ per vocabulary
  auto single = [&](const std::string& s) -> llama_token {
    const auto v = tokenize(vocab, s, false, true);
    return v.size() == 1 ? v[0] : LLAMA_TOKEN_NULL;
  };
  std::string specials_text;
  const json& dt = texts.at("detokenize");
  if (single("<|im_start|>") != LLAMA_TOKEN_NULL && single("<|im_end|>") != LLAMA_TOKEN_NULL) {
    specials_text = dt.at("specials_text_chatml");
  } else if (single("<|start|>") != LLAMA_TOKEN_NULL && single("<|message|>") != LLAMA_TOKEN_NULL &&
             single("<|end|>") != LLAMA_TOKEN_NULL) {
    specials_text = dt.at("specials_text_harmony");
  } else {
    // neither ChatML nor harmony: the template's own rendering of one user turn "hi"
    auto tmpls = common_chat_templates_init(mh.model, "");
    common_chat_templates_inputs in;
    common_chat_msg msg;
    msg.role = "user";
    msg.content = "hi";
    in.messages = {msg};
    in.use_jinja = true;
    in.add_generation_prompt = false;
    specials_text = common_chat_templates_apply(tmpls.get(), in).prompt;
  }
  // partial_utf8: the bytes f0 9f (the first half of an emoji) as one token where the vocabulary has one (the
  // shipped vocabularies do), else as its two byte tokens
  auto token_for_bytes = [&](const std::string& bytes) -> llama_token {
    for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++) {
      if (detokenize(vocab, {t}, false, false) == bytes) {
        return t;
      }
    }
    return LLAMA_TOKEN_NULL;
  };
  std::vector<llama_token> partial;
  if (const llama_token t = token_for_bytes("\xf0\x9f"); t != LLAMA_TOKEN_NULL) {
    partial = {t};
  } else {
    const llama_token t0 = token_for_bytes("\xf0"), t1 = token_for_bytes("\x9f");
    if (t0 == LLAMA_TOKEN_NULL || t1 == LLAMA_TOKEN_NULL) {
      fail(
          "no token or byte tokens of this vocabulary detokenize to the bytes f0 9f (the partial_utf8 case)");
    }
    partial = {t0, t1};
  }
  std::vector<llama_token> sp = tokenize(vocab, specials_text, false, true);
  sp.insert(sp.begin(), bos);
  std::vector<llama_token> hello = tokenize(vocab, "Hello", false, false);
  hello.insert(hello.begin(), bos);
  hello.push_back(eos);
  struct Detok {
    const char* name;
    std::vector<llama_token> ids;
    bool rm, unparse;
  };
  const std::vector<Detok> dcases = {
      {"unicode_round_trip", tokenize(vocab, dt.at("unicode_round_trip"), false, false), false, false},
      {"leading_spaces", tokenize(vocab, dt.at("leading_spaces"), false, false), false, false},
      {"specials_hidden", sp, false, false},
      {"specials_shown", sp, false, true},
      {"bos_eos_removed", hello, true, true},
      {"partial_utf8", partial, false, false},
  };
  json dj = json::array();
  for (const auto& d : dcases) {
    const std::string text = detokenize(vocab, d.ids, d.rm, d.unparse);
    json o;
    o["name"] = d.name;
    o["ids"] = ids_json(d.ids);
    o["remove_special"] = d.rm;
    o["unparse_special"] = d.unparse;
    o["text"] = utf8_sanitize(text);
    o["text_hex"] = hex(text);
    dj.push_back(o);
  }
  tok["detokenize"] = dj;
  out["tokenizer"] = tok;

  // --- chat ---
  const char* tmpl_src = llama_model_chat_template(mh.model, nullptr);
  if (!tmpl_src) {
    fail("%s has no tokenizer.chat_template (the chat cases and the long prompt need one)",
         model_path.c_str());
  }
  auto tmpls = common_chat_templates_init(mh.model, "");
  auto render = [&](const json& messages) {
    common_chat_templates_inputs in;  // defaults: enable_thinking true, no tools, no grammar
    for (const auto& m : messages) {
      common_chat_msg msg;
      msg.role = m.at("role");
      msg.content = m.at("content");
      in.messages.push_back(msg);
    }
    in.use_jinja = true;
    in.add_generation_prompt = true;
    return common_chat_templates_apply(tmpls.get(), in).prompt;
  };
  json chat;
  chat["source"] =
      "llama.cpp common_chat_templates_apply() from libllama-common (the path llama-server and "
      "llama-cli use, use_jinja=true, add_generation_prompt=true, enable_thinking default true) with "
      "the GGUF's own tokenizer.chat_template; prompt_ids = llama_tokenize(prompt, add_special=<vocab "
      "add_bos>, parse_special=true) as llama-server tokenizes a rendered chat prompt";
  chat["note"] =
      "when the vocab adds BOS itself (add_bos=true), llama.cpp strips a leading bos_token that the "
      "template rendered, so 'prompt' lacks it and prompt_ids start with the BOS id";
  chat["chat_template"] = tmpl_src;
  json cc = json::array();
  for (const auto& c : texts.at("chat_cases")) {
    const std::string prompt = render(c.at("messages"));
    json o;
    o["name"] = c.at("name");
    o["messages"] = c.at("messages");
    o["add_generation_prompt"] = true;
    o["prompt"] = prompt;
    o["prompt_ids"] = ids_json(tokenize(vocab, prompt, add_bos, true));
    cc.push_back(o);
  }
  chat["cases"] = cc;
  out["chat"] = chat;

  // --- prompts: the token ids the generation / teacher-forced / layers sections run on ---
  const json& pr = texts.at("prompts");
  json prompts, prompt_ids;
  for (const char* name : {"short", "medium", "long"}) {
    const json& p = pr.at(name);
    const size_t n = p.at("n_tokens");
    std::vector<llama_token> ids;
    json o;
    if (p.contains("text")) {
      ids = tokenize(vocab, p.at("text"), add_bos, false);
      o["text"] = p.at("text");
      o["how"] = "llama_tokenize(text, add_special=<vocab add_bos>, parse_special=false), first " +
                 std::to_string(n) + " ids";
    } else {
      ids = tokenize(vocab, render(p.at("messages")), add_bos, true);
      o["messages"] = p.at("messages");
      o["how"] = "chat-rendered (as in 'chat') then tokenized with parse_special=true, first " +
                 std::to_string(n) + " ids";
    }
    if (ids.size() < n) {
      fail("prompt '%s' gives only %zu tokens with this vocabulary, %zu needed", name, ids.size(), n);
    }
    ids.resize(n);
    prompts[name] = o;
    prompt_ids[name] = ids_json(ids);
  }
  out["prompts"] = prompts;
  out["prompt_ids"] = prompt_ids;
  write_json(out_path, out);
  return 0;
}

}  // namespace golden_maker
