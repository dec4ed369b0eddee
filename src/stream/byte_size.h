#pragma once
// Byte counts as users type them ("512M", "4G", "1.5G", "123456") and as reports print them.
#include <cstdint>
#include <string>
#include <string_view>

namespace df::stream {

// Parses a size with an optional binary suffix K, M, G or T (case-insensitive, optionally followed by "B" or
// "iB"); a fraction is allowed with a suffix ("1.5G"). Throws df::Error naming `what` (e.g. "--expert-cache")
// for anything else, for zero, and for sizes that do not fit in 64 bits.
uint64_t parse_byte_size(std::string_view text, std::string_view what);

// "512.0 MiB", "4.00 GiB", "812 B": three significant digits, binary units.
std::string format_bytes(uint64_t bytes);

}  // namespace df::stream
