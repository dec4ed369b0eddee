#include "util/env_int.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "util/error.h"

namespace df {

int env_int(const char* name, int lo, int hi, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string_view text(v);
  int x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc{} || end != text.data() + text.size() || x < lo || x > hi)
    fail("{}={} is not a whole number from {} to {}", name, v, lo, hi);
  return x;
}

}  // namespace df
