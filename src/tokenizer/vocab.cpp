#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::tok {

namespace {

struct PreSpec {
  std::string_view name;
  PreTokenizer kind;
  bool ignore_merges;
  bool add_bos;
  bool clean_spaces;
};

// tokenizer.ggml.pre values whose regex is one of ours, with the flags llama.cpp sets for them.
constexpr std::array kPreSpecs{
    PreSpec{"llama3", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"llama-v3", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"llama-bpe", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"lfm2", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"falcon3", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"falcon-h1", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"pixtral", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"midm-2.0", PreTokenizer::kLlama3, true, true, true},
    PreSpec{"dbrx", PreTokenizer::kLlama3, false, false, true},
    PreSpec{"smaug-bpe", PreTokenizer::kLlama3, false, false, true},
    PreSpec{"qwen2", PreTokenizer::kQwen2, false, false, false},
    PreSpec{"deepseek-r1-qwen", PreTokenizer::kQwen2, false, false, false},
    PreSpec{"hunyuan", PreTokenizer::kQwen2, false, false, false},
    PreSpec{"stablelm2", PreTokenizer::kQwen2, false, false, true},
    PreSpec{"megrez", PreTokenizer::kQwen2, false, false, true},
    PreSpec{"qwen35", PreTokenizer::kQwen35, false, false, false},
    PreSpec{"gpt-4o", PreTokenizer::kGpt4o, false, false, false},
    PreSpec{"llama4", PreTokenizer::kGpt4o, false, false, false},
    PreSpec{"minimax-m2", PreTokenizer::kGpt4o, false, false, false},
    PreSpec{"hunyuan-dense", PreTokenizer::kHunyuanDense, false, false, false},
    PreSpec{"deepseek-v3", PreTokenizer::kHunyuanDense, false, false, false},
    PreSpec{"joyai-llm", PreTokenizer::kHunyuanDense, false, false, false},
    // SentencePiece-style BPE over raw UTF-8 (ARCHITECTURES.md 9.5); "gemma4" is forced for model gemma4.
    PreSpec{"gemma4", PreTokenizer::kNewlineRuns, false, false, true},
    PreSpec{"granite-embed-multi-311m", PreTokenizer::kNewlineRuns, false, false, true},
};

// Texts llama.cpp treats as end of generation (ARCHITECTURES.md 9.6).
const std::vector<std::string_view> kEogTexts{
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",  // <｜end▁of▁sentence｜>
    "[e~[",
};

// Texts by which llama.cpp finds special ids that the GGUF does not name.
const std::vector<std::string_view> kEotTexts{"<|eot_id|>",
                                              "<|im_end|>",
                                              "<|end|>",
                                              "<end_of_turn>",
                                              "<|endoftext|>",
                                              "<|end_of_text|>",
                                              "<EOT>",
                                              "_<EOT>",
                                              "[EOT]",
                                              "<\xef\xbd\x9c"
                                              "end\xe2\x96\x81"
                                              "of\xe2\x96\x81"
                                              "sentence\xef\xbd\x9c>",
                                              "<end_of_utterance>"};
const std::vector<std::string_view> kEomTexts{"<|eom_id|>"};
const std::vector<std::string_view> kFimPreTexts{"<|fim_prefix|>",
                                                 "<fim-prefix>",
                                                 "<fim_prefix>",
                                                 "<\xef\xbd\x9c"
                                                 "fim\xe2\x96\x81"
                                                 "begin\xef\xbd\x9c>",
                                                 "<PRE>",
                                                 "\xe2\x96\x81<PRE>",
                                                 "<|code_prefix|>",
                                                 "<|prefix|>"};
const std::vector<std::string_view> kFimSufTexts{"<|fim_suffix|>",
                                                 "<fim-suffix>",
                                                 "<fim_suffix>",
                                                 "<\xef\xbd\x9c"
                                                 "fim\xe2\x96\x81"
                                                 "hole\xef\xbd\x9c>",
                                                 "<SUF>",
                                                 "\xe2\x96\x81<SUF>",
                                                 "<|code_suffix|>",
                                                 "<|suffix|>"};
const std::vector<std::string_view> kFimMidTexts{"<|fim_middle|>",
                                                 "<fim-middle>",
                                                 "<fim_middle>",
                                                 "<\xef\xbd\x9c"
                                                 "fim\xe2\x96\x81"
                                                 "end\xef\xbd\x9c>",
                                                 "<MID>",
                                                 "\xe2\x96\x81<MID>",
                                                 "<|code_middle|>",
                                                 "<|middle|>"};
const std::vector<std::string_view> kFimPadTexts{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const std::vector<std::string_view> kFimRepTexts{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                                 "<reponame>"};
const std::vector<std::string_view> kFimSepTexts{"<|file_sep|>"};

uint32_t attr_of_type(int32_t type, size_t id) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kUndefined:
      return kAttrUndefined;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
  }
  fail("invalid token type {} for token {} in tokenizer.ggml.token_type (valid: 0-6)", type, id);
}

std::vector<std::string> string_array(const gguf::File& file, std::string_view key) {
  const gguf::Value& v = file.require(key);
  if (!v.is_array() || v.elem != gguf::ValueType::STRING) {
    fail("GGUF key '{}' must be an array of strings, found {}", key,
         v.is_array() ? fmt::format("an array of {}", gguf::value_type_name(v.elem))
                      : std::string(gguf::value_type_name(v.type)));
  }
  std::vector<std::string> out;
  out.reserve(v.arr.size());
  for (const auto& item : v.arr) out.push_back(item.s);
  return out;
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::File& file) {
  VocabSpec spec;
  spec.model = file.require_string("tokenizer.ggml.model");
  spec.pre = file.get_string("tokenizer.ggml.pre").value_or("");
  spec.tokens = string_array(file, "tokenizer.ggml.tokens");
  if (const gguf::Value* types = file.find("tokenizer.ggml.token_type")) {
    if (!types->is_array()) fail("GGUF key 'tokenizer.ggml.token_type' must be an array of integers");
    spec.token_types.reserve(types->arr.size());
    for (size_t i = 0; i < types->arr.size(); ++i) {
      const int64_t t = types->arr[i].as_int("tokenizer.ggml.token_type element");
      if (t < INT32_MIN || t > INT32_MAX) fail("token type {} of token {} is out of range", t, i);
      spec.token_types.push_back(static_cast<int32_t>(t));
    }
  }
  if (file.has("tokenizer.ggml.merges")) spec.merges = string_array(file, "tokenizer.ggml.merges");
  // Scores are not used by BPE, but llama.cpp refuses a file whose scores are malformed.
  if (const gguf::Value* scores = file.find("tokenizer.ggml.scores")) {
    if (!scores->is_array() ||
        (scores->elem != gguf::ValueType::FLOAT32 && scores->elem != gguf::ValueType::INT32)) {
      fail("GGUF key 'tokenizer.ggml.scores' must be an array of float32 or int32");
    }
    if (scores->arr.size() < spec.tokens.size()) {
      fail("tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", scores->arr.size(),
           spec.tokens.size());
    }
  }

  const std::pair<std::string_view, std::optional<int64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &spec.bos},
      {"tokenizer.ggml.eos_token_id", &spec.eos},
      {"tokenizer.ggml.eot_token_id", &spec.eot},
      {"tokenizer.ggml.eom_token_id", &spec.eom},
      {"tokenizer.ggml.unknown_token_id", &spec.unk},
      {"tokenizer.ggml.seperator_token_id", &spec.sep},
      {"tokenizer.ggml.padding_token_id", &spec.pad},
      {"tokenizer.ggml.mask_token_id", &spec.mask},
      {"tokenizer.ggml.fim_pre_token_id", &spec.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &spec.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &spec.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &spec.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &spec.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &spec.fim_sep},
      // Deprecated names, read after the new ones as llama.cpp does (so they win when both are present).
      {"tokenizer.ggml.prefix_token_id", &spec.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &spec.fim_suf},
      {"tokenizer.ggml.middle_token_id", &spec.fim_mid},
  };
  for (const auto& [key, slot] : ids) {
    if (auto v = file.get_int(key)) *slot = *v;
  }
  spec.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  spec.add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  spec.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix");
  return build(std::move(spec));
}

Vocab Vocab::build(VocabSpec spec) {
  Vocab v;
  const bool gemma4_model = spec.model == "gemma4";
  if (spec.model != "gpt2" && !gemma4_model) {
    fail(
        "unsupported tokenizer model '{}' (tokenizer.ggml.model): supported are 'gpt2' (byte-level BPE) and "
        "'gemma4' (SentencePiece-style BPE)",
        spec.model);
  }
  if (gemma4_model) spec.pre = "gemma4";  // llama.cpp ignores tokenizer.ggml.pre for this model
  if (spec.pre.empty()) {
    fail("missing tokenizer.ggml.pre: the pre-tokenizer of this byte-level BPE vocabulary is unknown");
  }
  const auto pre =
      std::find_if(kPreSpecs.begin(), kPreSpecs.end(), [&](const PreSpec& p) { return p.name == spec.pre; });
  if (pre == kPreSpecs.end()) {
    std::string names;
    for (const auto& p : kPreSpecs) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
    fail("unsupported pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}", spec.pre, names);
  }
  v.pre_ = pre->kind;
  v.pre_name_ = spec.pre;
  v.ignore_merges_ = pre->ignore_merges;
  v.add_bos_ = pre->add_bos;
  v.clean_spaces_ = pre->clean_spaces;
  v.escape_whitespaces_ = pre->kind == PreTokenizer::kNewlineRuns;
  const std::string_view kind_name = v.escape_whitespaces_ ? "SentencePiece-style" : "byte-level";

  const size_t n = spec.tokens.size();
  if (n == 0) fail("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    fail("tokenizer.ggml.tokens has {} entries, more than token ids allow", n);
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    fail("tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", spec.token_types.size(),
         n);
  }
  if (spec.merges.empty())
    fail("missing or empty tokenizer.ggml.merges: a {} BPE vocabulary needs merges", kind_name);

  v.texts_ = std::move(spec.tokens);
  v.attrs_.resize(n);
  v.text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string& text = v.texts_[i];
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";  // llama.cpp's name for an empty token
    const auto [it, inserted] = v.text_to_id_.emplace(text, static_cast<TokenId>(i));
    if (!inserted) fail("duplicate token in vocabulary: '{}' has ids {} and {}", text, it->second, i);
    v.attrs_[i] = spec.token_types.empty() ? kAttrNormal : attr_of_type(spec.token_types[i], i);
    // llama.cpp reads a byte token's value from the two characters after "<0x" and fails to load the
    // vocabulary when there are none.
    if (v.attrs_[i] == kAttrByte && text.size() < 3)
      fail("byte token {} has the text '{}': a byte token's text is <0xXX>", i, text);
  }

  // Special ids: byte-level BPE defaults to 11 for BOS and EOS when the file names none; gemma4 to none.
  const auto id_in_range = [&](int64_t id) { return id >= 0 && static_cast<uint64_t>(id) < n; };
  const auto resolve = [&](const std::optional<int64_t>& stored, TokenId fallback, std::string_view key,
                           bool strict) -> TokenId {
    if (!id_in_range(fallback)) fallback = kNoToken;
    if (!stored) return fallback;
    if (id_in_range(*stored)) return static_cast<TokenId>(*stored);
    // llama.cpp ignores an out-of-range id with a warning; for the ids that drive prompting and stopping a
    // broken file is refused instead.
    if (strict) fail("tokenizer.ggml.{} = {} is out of range: the vocabulary has {} tokens", key, *stored, n);
    return fallback;
  };
  const TokenId default_bos_eos = gemma4_model ? kNoToken : 11;
  v.bos_ = resolve(spec.bos, default_bos_eos, "bos_token_id", true);
  v.eos_ = resolve(spec.eos, default_bos_eos, "eos_token_id", true);
  v.eot_ = resolve(spec.eot, kNoToken, "eot_token_id", true);
  v.eom_ = resolve(spec.eom, kNoToken, "eom_token_id", true);
  v.unk_ = resolve(spec.unk, kNoToken, "unknown_token_id", false);
  v.pad_ = resolve(spec.pad, kNoToken, "padding_token_id", false);
  // FIM prefix/suffix/middle ids are not exposed; they matter only for the CONTROL attribute found below.
  TokenId fim_pre = resolve(spec.fim_pre, kNoToken, "fim_pre_token_id", false);
  TokenId fim_suf = resolve(spec.fim_suf, kNoToken, "fim_suf_token_id", false);
  TokenId fim_mid = resolve(spec.fim_mid, kNoToken, "fim_mid_token_id", false);
  v.fim_pad_ = resolve(spec.fim_pad, kNoToken, "fim_pad_token_id", false);
  v.fim_rep_ = resolve(spec.fim_rep, kNoToken, "fim_rep_token_id", false);
  v.fim_sep_ = resolve(spec.fim_sep, kNoToken, "fim_sep_token_id", false);

  if (spec.add_bos) v.add_bos_ = *spec.add_bos;
  if (spec.add_eos) v.add_eos_ = *spec.add_eos;
  if (spec.add_space_prefix) v.add_space_prefix_ = *spec.add_space_prefix;
  if (v.escape_whitespaces_) {
    // llama.cpp always adds BOS for the Gemma 4 pre-tokenizer, whatever tokenizer.ggml.add_bos_token says.
    v.add_bos_ = true;
    if (v.bos_ == kNoToken)
      fail("tokenizer.ggml.bos_token_id is missing: a '{}' vocabulary always starts with BOS", v.pre_name_);
  }
  if (v.add_bos_ && v.bos_ == kNoToken)
    fail("tokenizer.ggml.add_bos_token is true, but the vocabulary has no BOS token");
  if (v.add_eos_ && v.eos_ == kNoToken)
    fail("tokenizer.ggml.add_eos_token is true, but the vocabulary has no EOS token");

  // Ids the file does not name are found by their text. llama.cpp takes the first hit of a hash-map walk;
  // with several candidates present we take the lowest id, which is deterministic. A token found this way is
  // treated as a control token.
  const auto find_by_text = [&](TokenId& id, const std::vector<std::string_view>& texts) {
    if (id != kNoToken) return;
    for (size_t i = 0; i < n; ++i) {
      if (std::find(texts.begin(), texts.end(), v.texts_[i]) != texts.end()) {
        id = static_cast<TokenId>(i);
        v.attrs_[i] |= kAttrControl;
        return;
      }
    }
  };
  find_by_text(v.eot_, kEotTexts);
  find_by_text(v.eom_, kEomTexts);
  find_by_text(fim_pre, kFimPreTexts);
  find_by_text(fim_suf, kFimSufTexts);
  find_by_text(fim_mid, kFimMidTexts);
  find_by_text(v.fim_pad_, kFimPadTexts);
  find_by_text(v.fim_rep_, kFimRepTexts);
  find_by_text(v.fim_sep_, kFimSepTexts);

  for (size_t i = 0; i < n; ++i) {
    if ((v.attrs_[i] & kAttrControl) && v.texts_[i].find("unused") != std::string::npos)
      v.attrs_[i] |= kAttrUnused;
  }

  // End-of-generation set.
  for (TokenId id : {v.fim_pad_, v.fim_rep_, v.fim_sep_}) {
    if (id != kNoToken) v.eog_.insert(id);
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::find(kEogTexts.begin(), kEogTexts.end(), v.texts_[i]) != kEogTexts.end()) {
      v.eog_.insert(static_cast<TokenId>(i));
      v.attrs_[i] |= kAttrControl;
    }
  }
  // gpt-oss: these harmony markers are always printed and always matched in text.
  for (std::string_view marker : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (auto id = v.find(marker)) v.attrs_[*id] = kAttrUserDefined;
  }
  for (TokenId id : {v.eos_, v.eot_, v.eom_}) {
    if (id != kNoToken) v.eog_.insert(id);
  }
  // o200k_harmony (and solar-open): with <|return|>/<|call|> present, <|end|> ends a message, not generation.
  {
    bool has_return = false, has_call = false, has_flush = false;
    TokenId end_id = kNoToken;
    for (TokenId id : v.eog_) {
      const std::string& t = v.texts_[id];
      if (t == "<|return|>")
        has_return = true;
      else if (t == "<|call|>" || t == "<|calls|>")
        has_call = true;
      else if (t == "<|flush|>")
        has_flush = true;
      else if (t == "<|end|>")
        end_id = id;
    }
    if (end_id != kNoToken && has_call && (has_return || has_flush)) {
      v.eog_.erase(end_id);
      v.attrs_[end_id] = kAttrUserDefined;
    }
  }
  // Gemma 4 / PaddleOCR: </s> is not an end of generation where <|tool_response> exists.
  {
    TokenId s_id = kNoToken;
    bool has_tool_response = false;
    for (TokenId id : v.eog_) {
      if (v.texts_[id] == "<|tool_response>") has_tool_response = true;
      if (v.texts_[id] == "</s>") s_id = id;
    }
    if (has_tool_response && s_id != kNoToken) {
      v.eog_.erase(s_id);
      v.attrs_[s_id] = kAttrNormal;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    if (v.attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown))
      v.special_tokens_.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(v.special_tokens_.begin(), v.special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return v.texts_[a].size() > v.texts_[b].size(); });

  v.bpe_ = BpeModel(spec.merges, v.text_to_id_, n, v.ignore_merges_,
                    v.escape_whitespaces_ ? BpeInput::kUtf8 : BpeInput::kByteLevel,
                    /*whole_newline_runs=*/v.pre_ == PreTokenizer::kNewlineRuns);
  return v;
}

const std::string& Vocab::text(TokenId id) const {
  if (!valid(id)) fail("token id {} is out of range: the vocabulary has {} tokens", id, texts_.size());
  return texts_[id];
}

uint32_t Vocab::attr(TokenId id) const {
  if (!valid(id)) fail("token id {} is out of range: the vocabulary has {} tokens", id, texts_.size());
  return attrs_[id];
}

std::optional<TokenId> Vocab::find(std::string_view text) const {
  const auto it = text_to_id_.find(std::string(text));
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

}  // namespace df::tok
