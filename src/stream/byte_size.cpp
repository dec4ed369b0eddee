#include "stream/byte_size.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace df::stream {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The multiplier of a suffix ("", "k", "kb", "kib", ...), or 0 for an unknown one.
uint64_t suffix_multiplier(const std::string& suffix) {
  static constexpr char kUnits[] = {'k', 'm', 'g', 't'};
  if (suffix.empty() || suffix == "b") return 1;
  for (int i = 0; i < 4; ++i) {
    const char u = kUnits[i];
    if (suffix == std::string(1, u) || suffix == std::string(1, u) + "b" ||
        suffix == std::string(1, u) + "ib")
      return uint64_t{1} << (10 * (i + 1));
  }
  return 0;
}

}  // namespace

uint64_t parse_byte_size(std::string_view text, std::string_view what) {
  const std::string s = lower(text);
  size_t digits_end = 0;
  bool seen_dot = false, seen_digit = false;
  while (digits_end < s.size()) {
    const char c = s[digits_end];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      seen_digit = true;
    } else if (c == '.' && !seen_dot) {
      seen_dot = true;
    } else {
      break;
    }
    ++digits_end;
  }
  const std::string number = s.substr(0, digits_end);
  const std::string suffix = s.substr(digits_end);
  const uint64_t mult = suffix_multiplier(suffix);
  if (!seen_digit || mult == 0)
    fail("{}: '{}' is not a size; write bytes or a number with K, M, G or T (e.g. 512M, 4G, 1.5G)", what,
         text);
  if (seen_dot && mult == 1) fail("{}: '{}' has a fraction of a byte; use a suffix (e.g. 1.5G)", what, text);

  const long double value = std::stold(number) * static_cast<long double>(mult);
  if (value >= static_cast<long double>(std::numeric_limits<uint64_t>::max()))
    fail("{}: '{}' is too large", what, text);
  const uint64_t bytes = static_cast<uint64_t>(std::floor(value));
  if (bytes == 0) fail("{}: '{}' is zero bytes", what, text);
  return bytes;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  const int decimals = v < 10 ? 2 : v < 100 ? 1 : 0;
  return fmt::format("{:.{}f} {}", v, decimals, kUnits[unit]);
}

}  // namespace df::stream
