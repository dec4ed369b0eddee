#include "tokenizer/unicode.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>

#include "util/error.h"

namespace df::tok {

namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Length of the well-formed sequence at `pos`, or 0 if it is ill-formed or cut off by the end of the text
// (RFC 3629 table). `truncated` tells the two apart: the bytes present are a valid start, the rest is
// missing.
size_t valid_sequence_at(std::string_view s, size_t pos, bool* truncated = nullptr) {
  if (truncated) *truncated = false;
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) {
      if (truncated) *truncated = true;
      return 0;
    }
    const uint8_t b = static_cast<uint8_t>(s[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : !is_continuation(b)) return 0;
  }
  return need;
}

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 0x144> to_byte{};  // every stand-in is below U+0144

  ByteMap() {
    to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next_free = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next_free++);
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

bool icu_is_newer_than_unicode_15_1() {
  static const bool newer = [] {
    UVersionInfo v;
    u_getUnicodeVersion(v);
    return v[0] > 15 || (v[0] == 15 && v[1] > 1);
  }();
  return newer;
}

// General category mask of the characters Unicode 15.1 assigned (ideographic description characters,
// CJK stroke HXG, CJK Unified Ideographs Extension I) for an ICU that predates it; Cn for the rest.
uint32_t unicode_15_1_addition(char32_t cp) {
  if ((cp >= 0x2FFC && cp <= 0x2FFF) || cp == 0x31EF) return U_GC_SO_MASK;
  if (cp >= 0x2EBF0 && cp <= 0x2EE5D) return U_GC_LO_MASK;
  return U_GC_CN_MASK;
}

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

size_t utf8_len_from_lead(uint8_t lead) {
  static constexpr std::array<uint8_t, 16> kByHighNibble{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

size_t utf8_valid_prefix(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = valid_sequence_at(bytes, pos);
    if (n == 0) break;
    pos += n;
  }
  return pos;
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    if (is_continuation(static_cast<uint8_t>(bytes[i]))) continue;
    bool truncated = false;
    valid_sequence_at(bytes, i, &truncated);
    return truncated ? back : 0;
  }
  return 0;
}

void require_valid_utf8(std::string_view bytes, std::string_view what) {
  const size_t pos = utf8_valid_prefix(bytes);
  if (pos == bytes.size()) return;
  bool truncated = false;
  valid_sequence_at(bytes, pos, &truncated);
  const auto b = static_cast<uint8_t>(bytes[pos]);
  if (truncated) {
    fail(
        "invalid UTF-8 in {}: truncated sequence at byte offset {} (lead byte 0x{:02x}, text ends after {} "
        "byte(s))",
        what, pos, b, bytes.size() - pos);
  }
  fail("invalid UTF-8 in {}: ill-formed sequence at byte offset {} (byte 0x{:02x})", what, pos, b);
}

void decode_utf8(std::string_view bytes, std::vector<char32_t>& cps, std::vector<uint32_t>& offsets) {
  cps.clear();
  offsets.clear();
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto b0 = static_cast<uint8_t>(bytes[pos]);
    // Bounded so that a caller who skipped validation gets garbage code points, never an overread.
    const size_t n = std::min(utf8_len_from_lead(b0), bytes.size() - pos);
    char32_t cp = 0;
    switch (n) {
      case 1:
        cp = b0;
        break;
      case 2:
        cp = b0 & 0x1F;
        break;
      case 3:
        cp = b0 & 0x0F;
        break;
      default:
        cp = b0 & 0x07;
        break;
    }
    for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(bytes[pos + i]) & 0x3F);
    offsets.push_back(static_cast<uint32_t>(pos));
    cps.push_back(cp);
    pos += n;
  }
  offsets.push_back(static_cast<uint32_t>(bytes.size()));
}

std::vector<char32_t> decode_utf8_lenient(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  const auto cont = [&](size_t i) {
    return pos + i < s.size() && is_continuation(static_cast<uint8_t>(s[pos + i]));
  };
  while (pos < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    const auto c = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + i]) & 0x3F); };
    if (b0 < 0x80) {
      out.push_back(b0);
      pos += 1;
    } else if ((b0 & 0xE0) == 0xC0 && cont(1)) {
      out.push_back((static_cast<char32_t>(b0 & 0x1F) << 6) | c(1));
      pos += 2;
    } else if ((b0 & 0xF0) == 0xE0 && cont(1) && cont(2)) {
      out.push_back((static_cast<char32_t>(b0 & 0x0F) << 12) | (c(1) << 6) | c(2));
      pos += 3;
    } else if ((b0 & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
      const char32_t cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (c(1) << 12) | (c(2) << 6) | c(3);
      out.push_back(cp <= 0x10FFFF ? cp : 0xFFFD);
      pos += 4;
    } else {
      out.push_back(0xFFFD);
      pos += 1;
    }
  }
  return out;
}

uint16_t char_class(char32_t cp) {
  if (cp < 0x80) {
    static constexpr std::string_view kAsciiPunctuation = "!\"#%&'()*,-./:;?@[\\]_{}";
    static constexpr std::string_view kAsciiSymbols = "$+<=>^`|~";
    uint16_t r = 0;
    if (cp >= 'A' && cp <= 'Z') r |= kLetter | kAsciiUpper;
    if (cp >= 'a' && cp <= 'z') r |= kLetter | kAsciiLower;
    if (cp >= '0' && cp <= '9') r |= kNumber;
    if ((cp >= 0x09 && cp <= 0x0D) || cp == ' ') r |= kWhitespace;
    if (cp == '\r' || cp == '\n') r |= kCrLf;
    if (kAsciiPunctuation.find(static_cast<char>(cp)) != std::string_view::npos) r |= kPunctuation;
    if (kAsciiSymbols.find(static_cast<char>(cp)) != std::string_view::npos) r |= kSymbol;
    return r;
  }
  const auto c = static_cast<UChar32>(cp);
  // llama.cpp's tables are Unicode 15.1; ICU may know another version. What came later is unassigned there,
  // and where ICU predates 15.1 the few characters 15.1 added get their category here.
  if (icu_is_newer_than_unicode_15_1()) {
    UVersionInfo age;
    u_charAge(c, age);
    if (age[0] > 15 || (age[0] == 15 && age[1] > 1)) return 0;
  }
  uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_CN_MASK) mask = unicode_15_1_addition(cp);
  if (u_isUWhiteSpace(c)) return kWhitespace;  // llama.cpp's collapsed text keeps nothing else of these
  uint16_t r = 0;
  if (mask & U_GC_L_MASK) r |= kLetter;
  if (mask & U_GC_N_MASK) r |= kNumber;
  if (mask & U_GC_P_MASK) r |= kPunctuation;
  if (mask & U_GC_S_MASK) r |= kSymbol;
  if (mask & U_GC_M_MASK) r |= kMark;
  return r;
}

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(char32_t cp) {
  const auto& map = byte_map();
  return cp < map.to_byte.size() ? map.to_byte[cp] : -1;
}

}  // namespace df::tok
