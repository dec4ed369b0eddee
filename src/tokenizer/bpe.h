#pragma once
// BPE (ARCHITECTURES.md 9.2 steps 4-6, 9.5): a pre-token is cut into initial symbols, adjacent pairs are
// merged lowest rank first (ties: leftmost), and the resulting pieces are looked up in the vocabulary.
// Byte-level vocabularies (gpt2) start from the GPT-2 stand-in character of every byte; Gemma 4 style
// vocabularies start from the raw UTF-8 characters and fall back to <0xXX> byte tokens. Pieces are numbered
// once at load (vocabulary texts keep their token id, strings that occur only in merges get ids after them),
// so encoding works on integers and never builds strings for lookups.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace df::tok {

using TokenId = int32_t;
using TextToId = std::unordered_map<std::string, TokenId>;

struct BpeScratch;

// How a pre-token becomes initial symbols, and what stands in for a piece that is no token.
enum class BpeInput {
  kByteLevel,  // GPT-2 stand-in character per byte; fallback: tokens whose text is one byte
  kUtf8,       // raw UTF-8 characters (llama.cpp's byte_encode = false); fallback: <0xXX> byte tokens
};

class BpeModel {
 public:
  BpeModel() = default;
  // `merges[i]` is "LEFT RIGHT" (split at the first space after position 0), rank i; the first of duplicate
  // pairs wins. Throws df::Error on a merge without a separator or with an empty part.
  // `whole_newline_runs`: a pre-token made only of newlines that is itself a token is emitted whole
  // (llama.cpp's Gemma 4 rule, applied before merging).
  BpeModel(const std::vector<std::string>& merges, const TextToId& vocab, size_t n_vocab, bool ignore_merges,
           BpeInput input = BpeInput::kByteLevel, bool whole_newline_runs = false);

  // Appends the tokens of one pre-token (raw UTF-8 bytes) to `out`. `vocab` is the map given at construction.
  void encode_piece(std::string_view bytes, const TextToId& vocab, std::vector<TokenId>& out,
                    BpeScratch& scratch) const;

  size_t n_merges() const { return n_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // piece id of LEFT+RIGHT
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // A UTF-8 character of 1-4 bytes as one integer (its bytes, first byte lowest), for the character table.
  static uint32_t char_key(std::string_view utf8_char);
  void emit(int32_t piece, std::string_view bytes, std::vector<TokenId>& out) const;
  void add_initial_symbols(std::string_view bytes, BpeScratch& scratch) const;
  // Emits the whole pre-token if a rule says so (ignore_merges, newline runs); false: merge it.
  bool emit_whole(std::string_view bytes, const TextToId& vocab, std::vector<TokenId>& out,
                  BpeScratch& scratch) const;

  size_t n_vocab_ = 0;
  size_t n_merges_ = 0;
  bool ignore_merges_ = false;
  BpeInput input_ = BpeInput::kByteLevel;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_piece_{};         // piece of each byte's stand-in character, or -1
  std::array<TokenId, 256> single_byte_token_{};  // token whose text is that single raw byte, or -1
  // kUtf8 only.
  std::unordered_map<uint32_t, int32_t> char_piece_;  // char_key -> piece of every one-character string
  std::array<TokenId, 256> hex_byte_token_{};         // token "<0xXX>" (upper-case hex) of each byte, or -1
  std::vector<TokenId> newline_run_token_;            // [k]: token whose text is k newlines, or -1
};

struct BpeScratch {
  struct Symbol {
    int32_t piece;   // -1: not a known string, so it never merges
    uint32_t start;  // byte range in the pre-token
    uint32_t len;    // 0 once merged into its left neighbour
    int32_t prev, next;
  };
  struct Bigram {
    int32_t rank;
    int32_t left, right;
    uint32_t left_len, right_len;  // lengths when queued: a change means the pair is stale
  };
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
  std::string encoded;
};

}  // namespace df::tok
