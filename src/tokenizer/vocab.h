#pragma once
// The vocabulary of a GGUF model (ARCHITECTURES.md 9.1): token texts and attributes, special ids, the
// end-of-generation set and the tokenizer flags, resolved the way llama.cpp's loader resolves them
// (defaults per pre-tokenizer, ids found by text, attributes it overrides at load).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace df::gguf {
class File;
}

namespace df::tok {

// Token attributes (bit flags, as llama.cpp keeps them).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

inline constexpr TokenId kNoToken = -1;

// What a vocabulary is built from; `from_gguf` fills it from the tokenizer.* keys, tests build it directly.
struct VocabSpec {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::string pre;             // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // empty: all normal
  std::vector<std::string> merges;
  // Special ids as stored (nullopt: key absent).
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos, add_eos;
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix
};

class Vocab {
 public:
  static Vocab from_gguf(const gguf::File& file);
  // Validates everything and applies llama.cpp's load-time rules. Throws df::Error.
  static Vocab build(VocabSpec spec);

  size_t size() const { return texts_.size(); }
  const std::string& text(TokenId id) const;  // raw vocabulary text; throws if out of range
  uint32_t attr(TokenId id) const;
  bool valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < texts_.size(); }
  std::optional<TokenId> find(std::string_view text) const;
  const TextToId& text_to_id() const { return text_to_id_; }

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_eog(TokenId id) const { return eog_.count(id) != 0; }
  const std::set<TokenId>& eog_ids() const { return eog_; }

  PreTokenizer pre_tokenizer() const { return pre_; }
  const std::string& pre_name() const { return pre_name_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool clean_spaces() const { return clean_spaces_; }
  // SentencePiece-style BPE (gemma4): spaces become U+2581 before BPE and back when decoding.
  bool escape_whitespaces() const { return escape_whitespaces_; }
  // Decoding drops one leading space of the first piece (unless a removed BOS came first).
  bool add_space_prefix() const { return add_space_prefix_; }
  const BpeModel& bpe() const { return bpe_; }

  // CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first (ties: lower id first): the order in which
  // their texts are cut out of raw text before pre-tokenization.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }

 private:
  std::vector<std::string> texts_;
  std::vector<uint32_t> attrs_;
  TextToId text_to_id_;
  BpeModel bpe_;
  PreTokenizer pre_ = PreTokenizer::kLlama3;
  std::string pre_name_;
  bool ignore_merges_ = false;
  bool clean_spaces_ = true;
  bool escape_whitespaces_ = false;
  bool add_space_prefix_ = false;
  bool add_bos_ = false;
  bool add_eos_ = false;
  TokenId bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken, unk_ = kNoToken;
  TokenId pad_ = kNoToken;
  TokenId fim_pad_ = kNoToken, fim_rep_ = kNoToken, fim_sep_ = kNoToken;
  std::set<TokenId> eog_;
  std::vector<TokenId> special_tokens_;
};

}  // namespace df::tok
