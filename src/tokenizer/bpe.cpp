#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace df::tok {

namespace {

// Heap order: the top is the lowest rank, and among equal ranks the leftmost pair.
bool heap_less(const BpeScratch::Bigram& a, const BpeScratch::Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& merges, const TextToId& vocab, size_t n_vocab,
                   bool ignore_merges)
    : n_vocab_(n_vocab), n_merges_(merges.size()), ignore_merges_(ignore_merges) {
  // Strings that appear in merges but not in the vocabulary still take part in merging, as in llama.cpp.
  std::unordered_map<std::string, int32_t> extra;
  const auto piece_of = [&](const std::string& s) -> int32_t {
    if (auto it = vocab.find(s); it != vocab.end()) return it->second;
    auto [it, inserted] = extra.emplace(s, static_cast<int32_t>(n_vocab + extra.size()));
    return it->second;
  };

  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sep = m.find(' ', 1);
    if (sep == std::string::npos || sep + 1 >= m.size()) {
      fail("malformed BPE merge #{} '{}' in tokenizer.ggml.merges: expected two parts separated by a space",
           i, m);
    }
    const std::string left = m.substr(0, sep), right = m.substr(sep + 1);
    const int32_t l = piece_of(left), r = piece_of(right);
    const int32_t result = piece_of(left + right);
    merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(i), result});
  }

  for (int b = 0; b < 256; ++b) {
    const std::string& stand_in = byte_to_unicode(static_cast<uint8_t>(b));
    if (auto it = vocab.find(stand_in); it != vocab.end()) {
      byte_piece_[b] = it->second;
    } else if (auto ex = extra.find(stand_in); ex != extra.end()) {
      byte_piece_[b] = ex->second;
    } else {
      byte_piece_[b] = -1;
    }
    const auto single = vocab.find(std::string(1, static_cast<char>(b)));
    single_byte_token_[b] = single != vocab.end() ? single->second : -1;
  }
}

void BpeModel::emit(int32_t piece, std::string_view bytes, std::vector<TokenId>& out) const {
  if (piece >= 0 && static_cast<size_t>(piece) < n_vocab_) {
    out.push_back(piece);
    return;
  }
  // Not a token: llama.cpp falls back to looking up each byte of the stand-in text as a one-byte token, and
  // drops the bytes that have none. With a complete byte-level vocabulary this never happens.
  for (const char raw : bytes) {
    for (const char c : byte_to_unicode(static_cast<uint8_t>(raw))) {
      const TokenId t = single_byte_token_[static_cast<uint8_t>(c)];
      if (t >= 0) out.push_back(t);
    }
  }
}

void BpeModel::encode_piece(std::string_view bytes, const TextToId& vocab, std::vector<TokenId>& out,
                            BpeScratch& scratch) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    scratch.encoded.clear();
    for (const char c : bytes) scratch.encoded += byte_to_unicode(static_cast<uint8_t>(c));
    if (auto it = vocab.find(scratch.encoded); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }

  auto& sym = scratch.symbols;
  auto& heap = scratch.heap;
  sym.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(bytes.size());
  for (int32_t i = 0; i < n; ++i) {
    sym.push_back({byte_piece_[static_cast<uint8_t>(bytes[i])], static_cast<uint32_t>(i), 1, i - 1,
                   i + 1 < n ? i + 1 : -1});
  }

  const auto try_queue = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const auto& a = sym[left];
    const auto& b = sym[right];
    if (a.piece < 0 || b.piece < 0) return;
    const auto it = merges_.find(pair_key(a.piece, b.piece));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, right, a.len, b.len});
    std::push_heap(heap.begin(), heap.end(), heap_less);
  };
  for (int32_t i = 1; i < n; ++i) try_queue(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    const BpeScratch::Bigram top = heap.back();
    heap.pop_back();
    auto& left = sym[top.left];
    auto& right = sym[top.right];
    if (left.len == 0 || right.len == 0 || left.len != top.left_len || right.len != top.right_len) continue;
    left.piece = merges_.at(pair_key(left.piece, right.piece)).result;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.left;
    try_queue(left.prev, top.left);
    try_queue(top.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    emit(sym[i].piece, bytes.substr(sym[i].start, sym[i].len), out);
  }
}

}  // namespace df::tok
