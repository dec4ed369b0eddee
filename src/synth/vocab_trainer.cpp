#include "synth/vocab_trainer.h"

#include <algorithm>

#include "synth/rng.h"

namespace df::synth {

namespace {

size_t code_points(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

BpeTrainer::BpeTrainer(size_t target, std::vector<std::string> alphabet, std::string space_mark)
    : target_(target), space_mark_(std::move(space_mark)) {
  for (auto& text : alphabet) add_token(std::move(text));
}

int BpeTrainer::id_of(std::string_view text) const {
  const auto it = ids_.find(std::string(text));
  return it == ids_.end() ? -1 : it->second;
}

void BpeTrainer::learn(std::vector<Word> words) {
  for (auto& w : words) words_.push_back(std::move(w));
  std::unordered_map<uint64_t, int64_t> pairs;
  for (const auto& w : words_) count_pairs(w, pairs, +1);
  while (texts_.size() < target_) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pairs) {
      if (count > best_count || (count == best_count && count > 0 && pair_less(key, best))) {
        best = key;
        best_count = count;
      }
    }
    if (best_count < 2) break;  // hapax pairs would only memorise the corpus
    const int a = static_cast<int>(best >> 32), b = static_cast<int>(best & 0xffffffff);
    const int merged = add_merge(a, b);
    for (auto& w : words_) {
      if (!contains_pair(w.syms, a, b)) continue;
      count_pairs(w, pairs, -1);
      std::vector<int> out;
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == a && w.syms[i + 1] == b) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
      count_pairs(w, pairs, +1);
    }
    std::erase_if(pairs, [](const auto& kv) { return kv.second <= 0; });
  }
}

void BpeTrainer::fill(uint64_t seed) {
  std::vector<int> heads, tails;
  for (size_t id = 0; id < texts_.size(); ++id) note_word(static_cast<int>(id), heads, tails);
  Rng rng(seed);
  size_t failures = 0;
  while (texts_.size() < target_) {
    int a, b;
    if (failures < 10000 && !heads.empty() && !tails.empty()) {
      a = heads[rng.below(heads.size())];
      b = tails[rng.below(tails.size())];
    } else {  // no fresh word-like pair found: any two non-empty tokens will do
      a = static_cast<int>(rng.below(texts_.size()));
      b = static_cast<int>(rng.below(texts_.size()));
    }
    const std::string text = texts_[a] + texts_[b];
    if (ids_.count(text) || code_points(text) > 14) {
      ++failures;
      continue;
    }
    failures = 0;
    const int id = add_merge(a, b);
    note_word(id, heads, tails);
  }
}

bool BpeTrainer::pair_less(uint64_t x, uint64_t y) const {
  const auto& xa = texts_[x >> 32];
  const auto& ya = texts_[y >> 32];
  if (xa != ya) return xa < ya;
  return texts_[x & 0xffffffff] < texts_[y & 0xffffffff];
}

bool BpeTrainer::contains_pair(const std::vector<int>& s, int a, int b) {
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] == a && s[i + 1] == b) return true;
  return false;
}

void BpeTrainer::count_pairs(const Word& w, std::unordered_map<uint64_t, int64_t>& pairs, int sign) {
  for (size_t i = 0; i + 1 < w.syms.size(); ++i) pairs[key(w.syms[i], w.syms[i + 1])] += sign * w.count;
}

bool BpeTrainer::is_word_token(std::string_view t) const {
  // The space mark may lead; the rest must be ASCII letters.
  if (t.starts_with(space_mark_)) t.remove_prefix(space_mark_.size());
  if (t.empty()) return false;
  return std::all_of(t.begin(), t.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
}

int BpeTrainer::add_token(std::string text) {
  const int id = static_cast<int>(texts_.size());
  ids_.emplace(text, id);
  texts_.push_back(std::move(text));
  return id;
}

// Records the merge; the merged text may already be a token (two segmentations of one string), which is valid
// BPE and adds no token.
int BpeTrainer::add_merge(int a, int b) {
  merges_.push_back(texts_[a] + " " + texts_[b]);
  std::string text = texts_[a] + texts_[b];
  if (auto it = ids_.find(text); it != ids_.end()) return it->second;
  return add_token(std::move(text));
}

// Only short word-like tokens join the pools, so that any pair of them stays within the length cap and the
// draw rarely fails.
void BpeTrainer::note_word(int id, std::vector<int>& heads, std::vector<int>& tails) const {
  if (!is_word_token(texts_[id]) || code_points(texts_[id]) > 7) return;
  heads.push_back(id);
  if (!texts_[id].starts_with(space_mark_)) tails.push_back(id);
}

}  // namespace df::synth
