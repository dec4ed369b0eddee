// The Gemma 4 style synthetic vocabulary (ARCHITECTURES.md 4.4, 9.5). What llama.cpp's Gemma 4 converter
// (conversion/gemma.py, Gemma4Model.set_vocab) writes: tokenizer.ggml.model = gemma4 and no pre-tokenizer
// key, a score of -1000 for every token, CONTROL for the tokenizer's special tokens except the seven it
// forces to USER_DEFINED so that they are always rendered, BYTE for <0xXX>, merges, the special ids,
// add_space_prefix = false and add_bos_token = true.
#include <algorithm>
#include <map>
#include <set>

#include "synth/vocab.h"
#include "synth/vocab_trainer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace df::synth {

namespace {

struct FixedToken {
  int id;
  std::string_view text;
  TokenType type;
};

// The family's special tokens at the ids the real Gemma 4 vocabulary gives them. The ids of <|turn>/<turn|>
// agree with HF's eos_token_id [1, 106]; the others are the ones third-party Gemma 4 tooling hard-codes
// (UNVERIFIED against the tokenizer itself). The ids in between are filled with <unusedN> control tokens,
// since what the real vocabulary holds there is not known here.
constexpr FixedToken kSpecials[] = {
    {0, "<pad>", kTokenControl},
    {1, "<eos>", kTokenControl},
    {2, "<bos>", kTokenControl},
    {3, "<unk>", kTokenControl},
    {4, "<mask>", kTokenControl},
    {46, "<|tool>", kTokenControl},
    {47, "<tool|>", kTokenControl},
    {48, "<|tool_call>", kTokenUserDefined},
    {49, "<tool_call|>", kTokenUserDefined},
    {50, "<|tool_response>", kTokenUserDefined},
    {51, "<tool_response|>", kTokenUserDefined},
    {52, "<|\"|>", kTokenUserDefined},
    {98, "<|think|>", kTokenControl},
    {100, "<|channel>", kTokenUserDefined},
    {101, "<channel|>", kTokenUserDefined},
    {105, "<|turn>", kTokenControl},
    {106, "<turn|>", kTokenControl},
};
constexpr int kSpecialRegion = 107;  // ids 0..106
// Newline runs of 1..kMaxNewlineRun characters are tokens from id 107 ("\n" is 107 in the real vocabulary),
// so that llama.cpp's whole-newline-run rule applies; longer runs are built by the newline merges.
constexpr int kMaxNewlineRun = 8;
constexpr std::string_view kEscapedSpace = "\u2581";  // ▁, which stands for a space in the vocabulary
constexpr float kScore = -1000.0f;                    // the converter's placeholder score for every token

bool is_digit(std::string_view ch) { return ch.size() == 1 && ch[0] >= '0' && ch[0] <= '9'; }

// The corpus as the tokenizer sees it: spaces escaped, cut into newline-free lines.
std::vector<std::string> escaped_lines() {
  std::vector<std::string> lines;
  for (std::string_view part : builtin_corpus()) {
    std::string line;
    for (const char c : part) {
      if (c == '\n') {
        if (!line.empty()) lines.push_back(std::move(line));
        line.clear();
      } else if (c == ' ') {
        line += kEscapedSpace;
      } else {
        line.push_back(c);
      }
    }
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

// The UTF-8 characters of s (the corpus is well-formed).
std::vector<std::string_view> characters(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

// SentencePiece-like training words: a line is cut before every run of ▁ that follows other text, and every
// digit stands alone (Gemma splits numbers into digits), so no merge crosses a word or joins digits.
// llama.cpp applies the merges to whole lines; merges learned this way never span two words there either.
std::map<std::string, int64_t> training_words(const std::vector<std::string>& lines) {
  std::map<std::string, int64_t> counts;
  for (const std::string& line : lines) {
    std::string word;
    bool previous_space = false;
    for (const std::string_view ch : characters(line)) {
      const bool space = ch == kEscapedSpace;
      if (!word.empty() &&
          ((space && !previous_space) || is_digit(ch) || is_digit(word.substr(word.size() - 1)))) {
        ++counts[word];
        word.clear();
      }
      word += ch;
      previous_space = space;
    }
    if (!word.empty()) ++counts[word];
  }
  return counts;
}

// The initial symbols: printable ASCII, ▁ and every other character of the corpus, in code point order.
std::vector<std::string> alphabet(const std::vector<std::string>& lines) {
  std::set<char32_t> cps;
  for (char32_t c = 0x21; c <= 0x7E; ++c) cps.insert(c);
  for (const std::string& line : lines) {
    for (const std::string_view ch : characters(line)) {
      const auto b = static_cast<unsigned char>(ch[0]);
      char32_t cp = ch.size() == 1   ? b
                    : ch.size() == 2 ? (b & 0x1F)
                    : ch.size() == 3 ? (b & 0x0F)
                                     : (b & 0x07);
      for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3F);
      cps.insert(cp);
    }
  }
  std::vector<std::string> out;
  for (const char32_t cp : cps) {
    std::string s;
    append_utf8(s, cp);
    out.push_back(std::move(s));
  }
  return out;
}

std::string byte_token(int b) { return fmt::format("<0x{:02X}>", b); }

size_t fixed_prefix_size() { return kSpecialRegion + kMaxNewlineRun + 256; }

// Thinking is on only when enable_thinking is given and not false (the real template's default is off). A
// system turn opens the prompt when thinking is on or the first message is a system message; <|think|> in it
// switches thinking on. Model turns lose their <|channel>...<channel|> thought sections. Only constructs the
// other synthetic templates use (namespace, for, if/elif, split, indexing, strip, is defined / is false).
constexpr const char* kChatTemplate =
    "{{- bos_token -}}"
    "{%- set ns = namespace(thinking=false, system=false, text='') -%}"
    "{%- if enable_thinking is defined -%}{%- set ns.thinking = true -%}"
    "{%- if enable_thinking is false -%}{%- set ns.thinking = false -%}{%- endif -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.index0 == 0 and message['role'] == 'system' -%}{%- set ns.system = true -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.thinking or ns.system -%}"
    "{{- '<|turn>system\\n' -}}"
    "{%- if ns.thinking -%}{{- '<|think|>\\n' -}}{%- endif -%}"
    "{%- if ns.system -%}{{- messages[0]['content'] -}}{%- endif -%}"
    "{{- '<turn|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- if 0 < loop.index0 -%}{{- '<|turn>system\\n' + content + '<turn|>\\n' -}}{%- endif -%}"
    "{%- elif message['role'] == 'user' -%}"
    "{{- '<|turn>user\\n' + content + '<turn|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- set ns.text = '' -%}"
    "{%- for part in content.split('<channel|>') -%}"
    "{%- set ns.text = ns.text + part.split('<|channel>')[0] -%}"
    "{%- endfor -%}"
    "{{- '<|turn>model\\n' + ns.text.strip() + '<turn|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}"
    "{%- if ns.thinking is false -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}{%- endif -%}";

}  // namespace

std::string gemma4_chat_template() { return kChatTemplate; }

int gemma4_min_vocab_size() {
  return static_cast<int>(fixed_prefix_size() + alphabet(escaped_lines()).size());
}

Vocab build_gemma4_vocab(int n_vocab) {
  const std::vector<std::string> lines = escaped_lines();
  std::vector<std::string> initial = alphabet(lines);
  const size_t fixed = fixed_prefix_size();
  if (n_vocab < static_cast<int>(fixed + initial.size()))
    fail(
        "--vocab {} is too small: gemma4 needs at least {} tokens ({} special ids, {} newline runs, 256 byte "
        "tokens and {} characters)",
        n_vocab, fixed + initial.size(), kSpecialRegion, kMaxNewlineRun, initial.size());

  BpeTrainer trainer(static_cast<size_t>(n_vocab) - fixed, std::move(initial), std::string(kEscapedSpace));
  std::vector<BpeTrainer::Word> words;
  for (const auto& [word, count] : training_words(lines)) {
    BpeTrainer::Word w{{}, count};
    for (const std::string_view ch : characters(word)) w.syms.push_back(trainer.id_of(ch));
    words.push_back(std::move(w));
  }
  trainer.learn(std::move(words));
  trainer.fill(0x6e33a4f11e7ULL);

  Vocab v;
  v.model = "gemma4";
  v.tokens.resize(kSpecialRegion);
  v.token_types.assign(kSpecialRegion, kTokenControl);
  int unused = 0;
  for (int id = 0; id < kSpecialRegion; ++id) {
    const auto* s = std::find_if(std::begin(kSpecials), std::end(kSpecials),
                                 [&](const FixedToken& t) { return t.id == id; });
    if (s != std::end(kSpecials)) {
      v.tokens[size_t(id)] = s->text;
      v.token_types[size_t(id)] = s->type;
    } else {
      v.tokens[size_t(id)] = fmt::format("<unused{}>", unused++);
    }
  }
  for (int k = 1; k <= kMaxNewlineRun; ++k) {
    v.tokens.push_back(std::string(size_t(k), '\n'));
    v.token_types.push_back(kTokenNormal);
  }
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_token(b));
    v.token_types.push_back(kTokenByte);
  }
  for (const std::string& t : trainer.texts()) {
    v.tokens.push_back(t);
    v.token_types.push_back(kTokenNormal);
  }
  v.scores.assign(v.tokens.size(), kScore);

  v.merges = trainer.merges();
  // Newline runs longer than the longest newline token merge pairwise: \n+\n, then 2+2, then 4+4.
  for (int k = 1; k < kMaxNewlineRun; k *= 2)
    v.merges.push_back(std::string(size_t(k), '\n') + " " + std::string(size_t(k), '\n'));

  std::set<std::string_view> seen;
  for (const std::string& t : v.tokens)
    if (!seen.insert(t).second) fail("internal: token '{}' occurs twice in the gemma4 vocabulary", t);

  v.bos_id = 2;
  v.eos_id = 1;
  v.pad_id = 0;
  v.unk_id = 3;
  v.add_bos = true;
  v.add_space_prefix = false;
  v.chat_template = gemma4_chat_template();
  return v;
}

}  // namespace df::synth
