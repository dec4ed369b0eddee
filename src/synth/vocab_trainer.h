#pragma once
// BPE training for the synthetic vocabularies (vocab.cpp, vocab_gemma4.cpp): merges learned from word counts,
// then deterministic filler merges up to the requested size. Every merge "A B" joins two earlier tokens into
// a token of the vocabulary.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace df::synth {

class BpeTrainer {
 public:
  struct Word {
    std::vector<int> syms;  // token ids, initially alphabet ids
    int64_t count;
  };

  // `alphabet`: the initial tokens (ids 0, 1, ...), one symbol each. `space_mark`: the text a token starts
  // with when it carries a leading space ("Ġ" for byte-level BPE, "▁" for SentencePiece-style BPE); filler
  // merges join word-like tokens around it. Training stops at `target` tokens.
  BpeTrainer(size_t target, std::vector<std::string> alphabet, std::string space_mark);

  // Repeatedly merges the most frequent adjacent pair (ties: the smaller pair of texts) while a pair occurs
  // at least twice.
  void learn(std::vector<Word> words);
  // Filler merges: join a word-like token (optionally with a leading space mark) and a word-like token
  // without one, at most 14 characters, never a duplicate. The pool grows with the filler tokens themselves.
  void fill(uint64_t seed);

  const std::vector<std::string>& texts() const { return texts_; }
  const std::vector<std::string>& merges() const { return merges_; }
  // Id of a token text, or -1.
  int id_of(std::string_view text) const;

 private:
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  bool pair_less(uint64_t x, uint64_t y) const;
  static bool contains_pair(const std::vector<int>& s, int a, int b);
  static void count_pairs(const Word& w, std::unordered_map<uint64_t, int64_t>& pairs, int sign);
  bool is_word_token(std::string_view t) const;
  int add_token(std::string text);
  int add_merge(int a, int b);
  void note_word(int id, std::vector<int>& heads, std::vector<int>& tails) const;

  size_t target_;
  std::string space_mark_;
  std::vector<Word> words_;
  std::vector<std::string> texts_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::string> merges_;
};

}  // namespace df::synth
