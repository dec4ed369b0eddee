#include "fixture_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace golden_maker {

std::string py_float(double d) {
  if (!std::isfinite(d)) {
    fail("internal: non-finite number %g cannot go into JSON", d);
  }
  char buf[64];
  auto r = ((double)(float)d == d)
               ? std::to_chars(buf, buf + sizeof(buf), (float)d, std::chars_format::scientific)
               : std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string s(buf, r.ptr);  // e.g. "-4.3082982e-06", "1e+06"
  const size_t epos = s.find('e');
  std::string mant = s.substr(0, epos);
  const int exp = atoi(s.c_str() + epos + 1);
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant = mant.substr(1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') {
      digits += c;
    }
  }
  if (exp >= -4 && exp < 16) {  // Python's repr: fixed notation in this range
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if ((int)digits.size() <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) {
    out += "." + digits.substr(1);
  }
  char e[16];
  snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + out + e;
}

std::string utf8_sanitize(const std::string& in) {
  std::string out;
  const auto* s = (const unsigned char*)in.data();
  size_t n = in.size(), i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      out += (char)c;
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) {
        lo = 0xA0;
      }
      if (c == 0xED) {
        hi = 0x9F;
      }
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) {
        lo = 0x90;
      }
      if (c == 0xF4) {
        hi = 0x8F;
      }
    } else {
      out += "\xEF\xBF\xBD";
      i++;
      continue;
    }
    size_t j = 1;
    for (; j < (size_t)len && i + j < n; j++) {
      const unsigned char cc = s[i + j];
      const unsigned char l = j == 1 ? lo : 0x80;
      const unsigned char h = j == 1 ? hi : 0xBF;
      if (cc < l || cc > h) {
        break;
      }
    }
    if (j == (size_t)len) {
      out.append(in, i, len);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += j;
  }
  return out;
}

namespace {

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += (char)c;
        }
    }
  }
  return out + "\"";
}

// nesting depth of arrays (a scalar is 0); -1 when an object is inside
int array_depth(const json& j) {
  if (j.is_object()) {
    return -1;
  }
  if (!j.is_array()) {
    return 0;
  }
  int d = 0;
  for (const auto& e : j) {
    const int de = array_depth(e);
    if (de < 0) {
      return -1;
    }
    d = std::max(d, de);
  }
  return d + 1;
}

void dump_json(const json& j, int indent, std::string& out) {
  const std::string pad(indent + 1, ' ');
  if (j.is_object()) {
    if (j.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    size_t i = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++i) {
      out += pad + json_str(it.key()) + ": ";
      dump_json(it.value(), indent + 1, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "}";
  } else if (j.is_array()) {
    const int d = array_depth(j);
    // the shipped layout: arrays of scalars and arrays of such arrays on one line, deeper ones and arrays of
    // objects one element per line
    if (j.empty() || (d >= 1 && d <= 2)) {
      out += "[";
      for (size_t i = 0; i < j.size(); i++) {
        if (i) {
          out += ",";
        }
        dump_json(j[i], indent, out);
      }
      out += "]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < j.size(); i++) {
      out += pad;
      dump_json(j[i], indent + 1, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "]";
  } else if (j.is_string()) {
    out += json_str(j.get<std::string>());
  } else if (j.is_number_float()) {
    out += py_float(j.get<double>());
  } else if (j.is_number_integer() || j.is_number_unsigned()) {
    out += j.dump();
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_null()) {
    out += "null";
  } else {
    fail("internal: unexpected JSON value");
  }
}

}  // namespace

void write_json(const std::string& path, const json& j) {
  std::string s;
  dump_json(j, 0, s);
  s += "\n";
  write_file(path, s.data(), s.size());
}

json f32(float x) { return json((double)x); }

json nullable_f32(bool has, float x) { return has ? f32(x) : json(nullptr); }

json float_list(const std::vector<float>& v) {
  json a = json::array();
  for (float x : v) {
    a.push_back(f32(x));
  }
  return a;
}

}  // namespace golden_maker
