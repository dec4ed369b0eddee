#include "synth/vocab.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "synth/vocab_trainer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace df::synth {

namespace {

const std::vector<SpecialToken> kLfm2Specials = {
    {"<|pad|>", kTokenControl},
    {"<|startoftext|>", kTokenControl},
    {"<|endoftext|>", kTokenControl},
    {"<|fim_pre|>", kTokenControl},
    {"<|fim_mid|>", kTokenControl},
    {"<|fim_suf|>", kTokenControl},
    {"<|im_start|>", kTokenControl},
    {"<|im_end|>", kTokenControl},
    {"<|tool_list_start|>", kTokenControl},
    {"<|tool_list_end|>", kTokenControl},
    {"<|tool_call_start|>", kTokenControl},
    {"<|tool_call_end|>", kTokenControl},
    {"<|tool_response_start|>", kTokenControl},
    {"<|tool_response_end|>", kTokenControl},
    {"<think>", kTokenUserDefined},
    {"</think>", kTokenUserDefined},
};

const std::vector<SpecialToken> kQwenSpecials = {
    {"<|endoftext|>", kTokenControl},      {"<|im_start|>", kTokenControl},
    {"<|im_end|>", kTokenControl},         {"<|object_ref_start|>", kTokenControl},
    {"<|object_ref_end|>", kTokenControl}, {"<tool_call>", kTokenUserDefined},
    {"</tool_call>", kTokenUserDefined},   {"<think>", kTokenUserDefined},
    {"</think>", kTokenUserDefined},
};

// Qwen3.5 / 3.6: the Qwen3 added tokens in the same order (<|endoftext|> 248044, <|im_start|> 248045,
// <|im_end|> 248046 ... <think> 248068, </think> 248069 in the real vocabulary), with the converter's types:
// the "special" ones control, the rest (tool calls, FIM, think) user-defined. Whatever the real vocabulary
// adds after </think> is not modelled (UNVERIFIED there).
const std::vector<SpecialToken> kQwen35Specials = {
    {"<|endoftext|>", kTokenControl},       {"<|im_start|>", kTokenControl},
    {"<|im_end|>", kTokenControl},          {"<|object_ref_start|>", kTokenControl},
    {"<|object_ref_end|>", kTokenControl},  {"<|box_start|>", kTokenControl},
    {"<|box_end|>", kTokenControl},         {"<|quad_start|>", kTokenControl},
    {"<|quad_end|>", kTokenControl},        {"<|vision_start|>", kTokenControl},
    {"<|vision_end|>", kTokenControl},      {"<|vision_pad|>", kTokenControl},
    {"<|image_pad|>", kTokenControl},       {"<|video_pad|>", kTokenControl},
    {"<tool_call>", kTokenUserDefined},     {"</tool_call>", kTokenUserDefined},
    {"<|fim_prefix|>", kTokenUserDefined},  {"<|fim_middle|>", kTokenUserDefined},
    {"<|fim_suffix|>", kTokenUserDefined},  {"<|fim_pad|>", kTokenUserDefined},
    {"<|repo_name|>", kTokenUserDefined},   {"<|file_sep|>", kTokenUserDefined},
    {"<tool_response>", kTokenUserDefined}, {"</tool_response>", kTokenUserDefined},
    {"<think>", kTokenUserDefined},         {"</think>", kTokenUserDefined},
};

// Hunyuan-dense style (full-width bars and U+2581 in the names), after the normal tokens as in the real
// vocabularies; the real Hy3 list is not published in a form checked here, so these are the family's.
const std::vector<SpecialToken> kHunyuanSpecials = {
    {"<\uFF5Chy_begin\u2581of\u2581sentence\uFF5C>", kTokenControl},
    {"<\uFF5Chy_place\u2581holder\u2581no\u25812\uFF5C>", kTokenControl},
    {"<\uFF5Chy_place\u2581holder\u2581no\u25813\uFF5C>", kTokenControl},
    {"<\uFF5Chy_User\uFF5C>", kTokenControl},
    {"<\uFF5Chy_Assistant\uFF5C>", kTokenControl},
    {"<\uFF5Chy_\u2581pad\u2581\uFF5C>", kTokenControl},
    {"<think>", kTokenUserDefined},
    {"</think>", kTokenUserDefined},
    {"<tool_call>", kTokenUserDefined},
    {"</tool_call>", kTokenUserDefined},
};

// Decodes one code point at s[i] (the corpus is valid UTF-8) and advances i.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(len);
  return cp;
}

bool is_space(uint32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0xA0;
}
bool is_newline(uint32_t c) { return c == '\n' || c == '\r'; }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_letter(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && !is_space(c));
}
bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

}  // namespace

const std::vector<SpecialToken>& special_tokens(Arch arch) {
  switch (arch) {
    case Arch::lfm2moe:
      return kLfm2Specials;
    case Arch::qwen3moe:
      return kQwenSpecials;
    case Arch::qwen35moe:
      return kQwen35Specials;
    case Arch::hy_v3:
      return kHunyuanSpecials;
    case Arch::gemma4:
      break;
  }
  // build_gemma4_vocab lays out its own special tokens (ids 0..106); none of these tables applies.
  static const std::vector<SpecialToken> kNone;
  return kNone;
}

int min_vocab_size(Arch arch) {
  if (arch == Arch::gemma4) return gemma4_min_vocab_size();
  return static_cast<int>(special_tokens(arch).size()) + 256;
}

std::string byte_token_text(uint8_t b) {
  // Printable Latin-1 bytes keep their code point; the other 68 map, in byte order, to U+0100 onwards.
  const auto printable = [](int x) {
    return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
  };
  uint32_t cp = b;
  if (!printable(b)) {
    uint32_t n = 0;
    for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
    cp = 256 + n;
  }
  std::string out;
  append_utf8(out, cp);
  return out;
}

std::vector<std::string> pretokenize(std::string_view text, int max_digits) {
  std::vector<uint32_t> cps;
  std::vector<size_t> at;  // byte offset of each code point, plus the end
  for (size_t i = 0; i < text.size();) {
    at.push_back(i);
    cps.push_back(next_code_point(text, i));
  }
  at.push_back(text.size());
  const size_t n = cps.size();
  const auto lower = [&](size_t k) {
    return k < n && cps[k] < 128 ? std::tolower(static_cast<int>(cps[k])) : -1;
  };

  std::vector<std::string> out;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    // 's 't 're 've 'm 'll 'd (either case)
    if (cps[i] == '\'') {
      const int c1 = lower(i + 1), c2 = lower(i + 2);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        j = i + 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        j = i + 3;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (j == i) {
      size_t k = i;
      if (!is_letter(cps[k]) && !is_digit(cps[k]) && !is_newline(cps[k]) && k + 1 < n &&
          is_letter(cps[k + 1]))
        ++k;
      if (is_letter(cps[k])) {
        while (k < n && is_letter(cps[k])) ++k;
        j = k;
      }
    }
    // \p{N}{1,max_digits}
    if (j == i && is_digit(cps[i])) {
      while (j < n && is_digit(cps[j]) && j - i < static_cast<size_t>(max_digits)) ++j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (j == i) {
      size_t k = i;
      if (cps[k] == ' ' && k + 1 < n && is_other(cps[k + 1])) ++k;
      if (is_other(cps[k])) {
        while (k < n && is_other(cps[k])) ++k;
        while (k < n && is_newline(cps[k])) ++k;
        j = k;
      }
    }
    if (j == i) {  // whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+
      size_t end = i;
      while (end < n && is_space(cps[end])) ++end;
      size_t last_newline = n;
      for (size_t k = i; k < end; ++k)
        if (is_newline(cps[k])) last_newline = k;
      if (last_newline != n)
        j = last_newline + 1;
      else if (end == n || end - i == 1)
        j = end;
      else
        j = end - 1;
    }
    out.emplace_back(text.substr(at[i], at[j] - at[i]));
    i = j;
  }
  return out;
}

Vocab build_vocab(Arch arch, int n_vocab) {
  if (arch == Arch::gemma4) return build_gemma4_vocab(n_vocab);
  if (n_vocab < min_vocab_size(arch))
    fail("--vocab {} is too small: {} needs at least {} tokens ({} special tokens and 256 byte tokens)",
         n_vocab, arch_name(arch), min_vocab_size(arch), special_tokens(arch).size());
  const auto& specials = special_tokens(arch);
  const bool lfm2 = arch == Arch::lfm2moe;

  // Qwen2 and Qwen3.5 split digits one by one. Qwen3.5 also learns from text with combining marks, which its
  // pre-tokenizer keeps inside words (as this trainer's split does: every non-ASCII character is a letter
  // here). That text counts twice: the trainer merges only pairs seen at least twice, and so learns its words
  // whole (in place of filler merges; the other texts' tokens barely change).
  const bool qwen35 = arch == Arch::qwen35moe;
  const int max_digits = arch == Arch::qwen3moe || qwen35 ? 1 : 3;
  std::map<std::string, int64_t> word_counts;
  for (std::string_view part : builtin_corpus())
    for (auto& piece : pretokenize(part, max_digits)) ++word_counts[piece];
  if (qwen35)
    for (auto& piece : pretokenize(combining_marks_corpus(), max_digits)) word_counts[piece] += 2;
  std::vector<std::string> alphabet;
  for (int b = 0; b < 256; ++b) alphabet.push_back(byte_token_text(static_cast<uint8_t>(b)));
  BpeTrainer trainer(static_cast<size_t>(n_vocab) - specials.size(), std::move(alphabet), "\xC4\xA0");  // Ġ
  std::vector<BpeTrainer::Word> words;
  for (const auto& [word, count] : word_counts) {
    BpeTrainer::Word w{{}, count};
    for (const unsigned char b : word) w.syms.push_back(b);  // byte b is token b of the alphabet
    words.push_back(std::move(w));
  }
  trainer.learn(std::move(words));
  trainer.fill(0x5eed0f11e7ULL);

  Vocab v;
  const auto add_specials = [&] {
    for (const auto& s : specials) {
      v.tokens.emplace_back(s.text);
      v.token_types.push_back(s.type);
    }
  };
  if (lfm2) add_specials();
  for (const auto& t : trainer.texts()) {
    v.tokens.push_back(t);
    v.token_types.push_back(kTokenNormal);
  }
  if (!lfm2) add_specials();
  v.merges = trainer.merges();

  const auto id_of = [&](std::string_view text) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == text) return static_cast<uint32_t>(i);
    fail("internal: special token '{}' missing from the synthetic vocabulary", text);
  };
  if (lfm2) {
    v.pre = "lfm2";
    v.bos_id = id_of("<|startoftext|>");
    v.eos_id = id_of("<|im_end|>");
    v.pad_id = id_of("<|pad|>");
    v.add_bos = true;
    v.has_add_eos = true;
  } else if (arch == Arch::hy_v3) {
    // The Hunyuan-dense vocabulary family's split (ARCHITECTURES.md 6.4, 9.3).
    v.pre = "hunyuan-dense";
    v.bos_id = id_of("<\uFF5Chy_begin\u2581of\u2581sentence\uFF5C>");
    v.eos_id = id_of("<\uFF5Chy_place\u2581holder\u2581no\u25812\uFF5C>");
    v.pad_id = id_of("<\uFF5Chy_\u2581pad\u2581\uFF5C>");
    v.add_bos = true;
    v.has_add_eos = true;
  } else {
    // Qwen3 "qwen2", Qwen3.5 "qwen35" (ARCHITECTURES.md 2.4, 5.6): no BOS added, <|endoftext|> the GGUF's BOS
    // and padding, <|im_end|> its EOS.
    v.pre = qwen35 ? "qwen35" : "qwen2";
    v.bos_id = id_of("<|endoftext|>");
    v.eos_id = id_of("<|im_end|>");
    v.pad_id = id_of("<|endoftext|>");
    v.add_bos = false;
    v.has_add_eos = false;
  }
  v.chat_template = chat_template(arch);
  return v;
}

}  // namespace df::synth
