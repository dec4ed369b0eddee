// JSON output in the layout of the shipped fixtures (written by Python: its float repr, its indentation).
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace golden_maker {

// The shipped files were written by Python from float32 arrays: every float32 value appears as the shortest
// decimal that round-trips in float32, printed the way Python's repr prints a float (1e-05, 0.0001, 38.74224,
// 1000000.0). A double that is exactly a float32 is printed that way; other doubles (writer knobs such as
// 0.02) get the shortest double digits, as Python would print them.
std::string py_float(double d);

// Replaces invalid UTF-8 by U+FFFD the way Python's bytes.decode(errors="replace") does (one U+FFFD per
// maximal subpart of an ill-formed sequence), since the shipped "text" fields were made that way.
std::string utf8_sanitize(const std::string& in);

void write_json(const std::string& path, const json& j);

json f32(float x);
json nullable_f32(bool has, float x);
json float_list(const std::vector<float>& v);

}  // namespace golden_maker
