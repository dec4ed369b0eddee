#include "tokenizer/bpe.h"

#include <fmt/format.h>

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
                   bool ignore_merges, BpeInput input, bool whole_newline_runs)
    : n_vocab_(n_vocab), n_merges_(merges.size()), ignore_merges_(ignore_merges), input_(input) {
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
    const auto hex = vocab.find(fmt::format("<0x{:02X}>", b));
    hex_byte_token_[b] = hex != vocab.end() ? hex->second : -1;
  }

  if (input_ == BpeInput::kUtf8) {
    // Initial symbols are cut by the lead byte's length (as llama.cpp cuts them); every string of exactly one
    // such symbol, in the vocabulary or only in merges, can start a merge.
    const auto note_char = [&](const std::string& s, int32_t piece) {
      if (!s.empty() && s.size() <= 4 && utf8_len_from_lead(static_cast<uint8_t>(s[0])) == s.size())
        char_piece_.emplace(char_key(s), piece);
    };
    for (const auto& [text, id] : vocab) note_char(text, id);
    for (const auto& [text, piece] : extra) note_char(text, piece);
  }
  if (whole_newline_runs) {
    for (const auto& [text, id] : vocab) {
      if (text.empty() || text.find_first_not_of('\n') != std::string::npos) continue;
      if (newline_run_token_.size() <= text.size()) newline_run_token_.resize(text.size() + 1, -1);
      newline_run_token_[text.size()] = id;
    }
  }
}

uint32_t BpeModel::char_key(std::string_view utf8_char) {
  uint32_t key = 0;
  for (size_t i = 0; i < utf8_char.size(); ++i)
    key |= static_cast<uint32_t>(static_cast<uint8_t>(utf8_char[i])) << (8 * i);
  return key;
}

void BpeModel::emit(int32_t piece, std::string_view bytes, std::vector<TokenId>& out) const {
  if (piece >= 0 && static_cast<size_t>(piece) < n_vocab_) {
    out.push_back(piece);
    return;
  }
  if (input_ == BpeInput::kUtf8) {
    // Not a token: one <0xXX> token per byte; a byte without one is dropped, as in llama.cpp.
    for (const char raw : bytes) {
      const TokenId t = hex_byte_token_[static_cast<uint8_t>(raw)];
      if (t >= 0) out.push_back(t);
    }
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

bool BpeModel::emit_whole(std::string_view bytes, const TextToId& vocab, std::vector<TokenId>& out,
                          BpeScratch& scratch) const {
  if (ignore_merges_) {
    scratch.encoded.clear();
    if (input_ == BpeInput::kUtf8) {
      scratch.encoded.assign(bytes);
    } else {
      for (const char c : bytes) scratch.encoded += byte_to_unicode(static_cast<uint8_t>(c));
    }
    if (auto it = vocab.find(scratch.encoded); it != vocab.end()) {
      out.push_back(it->second);
      return true;
    }
  }
  if (bytes.size() < newline_run_token_.size() && newline_run_token_[bytes.size()] >= 0 &&
      bytes.find_first_not_of('\n') == std::string_view::npos) {
    out.push_back(newline_run_token_[bytes.size()]);
    return true;
  }
  return false;
}

void BpeModel::add_initial_symbols(std::string_view bytes, BpeScratch& scratch) const {
  auto& sym = scratch.symbols;
  const auto n = static_cast<uint32_t>(bytes.size());
  if (input_ == BpeInput::kByteLevel) {
    for (uint32_t i = 0; i < n; ++i) sym.push_back({byte_piece_[static_cast<uint8_t>(bytes[i])], i, 1, 0, 0});
  } else {
    for (uint32_t i = 0; i < n;) {
      const auto len =
          static_cast<uint32_t>(std::min<size_t>(n - i, utf8_len_from_lead(static_cast<uint8_t>(bytes[i]))));
      const auto it = char_piece_.find(char_key(bytes.substr(i, len)));
      sym.push_back({it != char_piece_.end() ? it->second : -1, i, len, 0, 0});
      i += len;
    }
  }
  const auto count = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < count; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < count ? i + 1 : -1;
  }
}

void BpeModel::encode_piece(std::string_view bytes, const TextToId& vocab, std::vector<TokenId>& out,
                            BpeScratch& scratch) const {
  if (bytes.empty()) return;
  if (emit_whole(bytes, vocab, out, scratch)) return;

  auto& sym = scratch.symbols;
  auto& heap = scratch.heap;
  sym.clear();
  heap.clear();
  add_initial_symbols(bytes, scratch);
  const auto n = static_cast<int32_t>(sym.size());

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
