// golden_maker: writes diskformer's golden fixtures (schema "diskformer-golden/1", see
// shared/golden/README.md) for one GGUF model, from llama.cpp v0.4.0 as shipped prebuilt by
// node-llama-cpp 3.21.1.
//
// Only the public llama.h / ggml-backend.h / gguf.h API is used, plus libllama-common's
// common_chat_templates_* for chat rendering (exactly what llama-server does with the GGUF's template).
//
// Subcommands (the driver `make` runs the others as child processes of this same binary):
//   make GGUF NAME OUTDIR [options]   everything: text, reference run, the five other CPU paths, statistics,
//                                     NAME.json + NAME.tf_logits.f32 + NAME.l_out.f32 + NAME.topk.f32
//   text  --model GGUF --texts F --out F.json          tokenizer, chat, prompt ids, model description (no
//   compute) run   --model GGUF --jobs F.json --out DIR [--backend auto|haswell|sse42|x64|...] [--no-repack]
//   [--threads N]
//                                     greedy generations and teacher-forced batches on one CPU path, raw
//                                     dumps
//
// Why child processes: a ggml CPU backend variant (libggml-cpu-<variant>.so) cannot be swapped inside a
// process once a model runs on it, so every CPU path gets its own process; the parent never loads a backend
// itself.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// errors, files
// ---------------------------------------------------------------------------------------------------------------

[[noreturn]] void fail(const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  throw std::runtime_error(buf);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    fail("cannot read %s", path.c_str());
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const void* data, size_t n) {
  // write to a temporary name first so that an interrupted run never leaves a truncated fixture behind
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "wb");
  if (!f) {
    fail("cannot write %s: %s", tmp.c_str(), strerror(errno));
  }
  if (n && fwrite(data, 1, n, f) != n) {
    fclose(f);
    fail("short write to %s", tmp.c_str());
  }
  if (fclose(f) != 0) {
    fail("cannot close %s", tmp.c_str());
  }
  fs::rename(tmp, path);
}

template <typename T>
void write_vec(const std::string& path, const std::vector<T>& v) {
  write_file(path, v.data(), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> read_vec(const std::string& path, size_t expect_count) {
  const std::string s = read_file(path);
  if (s.size() != expect_count * sizeof(T)) {
    fail("%s: %zu bytes, expected %zu", path.c_str(), s.size(), expect_count * sizeof(T));
  }
  std::vector<T> v(expect_count);
  memcpy(v.data(), s.data(), s.size());
  return v;
}

json read_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("%s: bad JSON: %s", path.c_str(), e.what());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), for the hashes the JSON carries
// ---------------------------------------------------------------------------------------------------------------

std::string sha256_hex(const void* data, size_t len) {
  static const uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  };
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  std::vector<uint8_t> msg((const uint8_t*)data, (const uint8_t*)data + len);
  msg.push_back(0x80);
  while (msg.size() % 64 != 56) {
    msg.push_back(0);
  }
  const uint64_t bits = (uint64_t)len * 8;
  for (int i = 7; i >= 0; i--) {
    msg.push_back((uint8_t)(bits >> (i * 8)));
  }
  for (size_t off = 0; off < msg.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) {
      w[i] = (uint32_t)msg[off + 4 * i] << 24 | (uint32_t)msg[off + 4 * i + 1] << 16 |
             (uint32_t)msg[off + 4 * i + 2] << 8 | (uint32_t)msg[off + 4 * i + 3];
    }
    for (int i = 16; i < 64; i++) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
      const uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = hh + S1 + ch + K[i] + w[i];
      const uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = S0 + mj;
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; i++) {
    snprintf(out + 8 * i, 9, "%08x", h[i]);
  }
  return std::string(out, 64);
}

std::string sha256_file(const std::string& path) {
  const std::string s = read_file(path);
  return sha256_hex(s.data(), s.size());
}

// ---------------------------------------------------------------------------------------------------------------
// JSON output in the layout of the shipped fixtures
// ---------------------------------------------------------------------------------------------------------------

// The shipped files were written by Python from float32 arrays: every float32 value appears as the shortest
// decimal that round-trips in float32, printed the way Python's repr prints a float (1e-05, 0.0001, 38.74224,
// 1000000.0). A double that is exactly a float32 is printed that way; other doubles (writer knobs such as
// 0.02) get the shortest double digits, as Python would print them.
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

// Replaces invalid UTF-8 by U+FFFD the way Python's bytes.decode(errors="replace") does (one U+FFFD per
// maximal subpart of an ill-formed sequence), since the shipped "text" fields were made that way.
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

void write_json(const std::string& path, const json& j) {
  std::string s;
  dump_json(j, 0, s);
  s += "\n";
  write_file(path, s.data(), s.size());
}

json f32(float x) { return json((double)x); }

json nullable_f32(bool has, float x) { return has ? f32(x) : json(nullptr); }

// ---------------------------------------------------------------------------------------------------------------
// llama.cpp helpers
// ---------------------------------------------------------------------------------------------------------------

int g_log_level = GGML_LOG_LEVEL_WARN;

void log_cb(ggml_log_level level, const char* text, void*) {
  // llama.cpp logs a lot at INFO; keep warnings and errors (CONT lines continue the previous message)
  static ggml_log_level last = GGML_LOG_LEVEL_INFO;
  if (level != GGML_LOG_LEVEL_CONT) {
    last = level;
  }
  if (last >= g_log_level) {
    fputs(text, stderr);
  }
}

// The directory of the prebuilt node-llama-cpp libraries this binary is linked against (found through
// /proc/self/maps, so that the CPU variants are taken from the same place as libllama itself).
std::string prebuilt_dir() {
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    const size_t p = line.find('/');
    if (p != std::string::npos && line.find("libllama.v0.4.0.so") != std::string::npos) {
      return fs::path(line.substr(p)).parent_path().string();
    }
  }
  fail("libllama.v0.4.0.so is not loaded (build.sh links it)");
}

// Which libggml-cpu-*.so this process runs on (ggml_backend_load_all picks by score; report what it picked).
std::string loaded_cpu_variant() {
  std::ifstream f("/proc/self/maps");
  std::string line, found;
  while (std::getline(f, line)) {
    const size_t p = line.find("libggml-cpu-");
    if (p != std::string::npos) {
      found = fs::path(line.substr(line.find('/'))).filename().string();
    }
  }
  return found;
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text, bool add_special,
                                  bool parse_special) {
  std::vector<llama_token> out(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), out.data(), (int32_t)out.size(),
                             add_special, parse_special);
  if (n < 0) {
    out.resize(-n);
    n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), out.data(), (int32_t)out.size(), add_special,
                       parse_special);
  }
  if (n < 0) {
    fail("llama_tokenize failed");
  }
  out.resize(n);
  return out;
}

std::string detokenize(const llama_vocab* vocab, const std::vector<llama_token>& ids, bool remove_special,
                       bool unparse_special) {
  std::string out(ids.size() * 16 + 16, '\0');
  int32_t n = llama_detokenize(vocab, ids.data(), (int32_t)ids.size(), out.data(), (int32_t)out.size(),
                               remove_special, unparse_special);
  if (n < 0) {
    out.resize(-n);
    n = llama_detokenize(vocab, ids.data(), (int32_t)ids.size(), out.data(), (int32_t)out.size(),
                         remove_special, unparse_special);
  }
  if (n < 0) {
    fail("llama_detokenize failed");
  }
  out.resize(n);
  return out;
}

std::string hex(const std::string& s) {
  std::string out;
  char b[3];
  for (unsigned char c : s) {
    snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out;
}

json ids_json(const std::vector<llama_token>& v) {
  json a = json::array();
  for (auto t : v) {
    a.push_back(t);
  }
  return a;
}

std::vector<llama_token> ids_from(const json& a) {
  std::vector<llama_token> v;
  for (const auto& x : a) {
    v.push_back(x.get<llama_token>());
  }
  return v;
}

struct ModelHolder {
  llama_model* model = nullptr;
  ~ModelHolder() {
    if (model) {
      llama_model_free(model);
    }
  }
};

llama_model* load_model(const std::string& path, bool vocab_only, bool use_extra_bufts) {
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = vocab_only;
  mp.use_extra_bufts = use_extra_bufts;  // false = llama-cli's --no-repack
  mp.n_gpu_layers = 0;                   // CPU only (no GPU backend is loaded anyway)
  llama_model* m = llama_model_load_from_file(path.c_str(), mp);
  if (!m) {
    fail("llama.cpp could not load %s (see the messages above)", path.c_str());
  }
  return m;
}

// ---------------------------------------------------------------------------------------------------------------
// `text`: tokenizer cases, chat renderings, prompt ids, model description
// ---------------------------------------------------------------------------------------------------------------

const char* ggml_type_label(ggml_type t) {
  // the block type names as the fixtures spell them (upper case: Q4_0, Q6_K, MXFP4, F16, F32, Q8_0)
  static std::map<int, std::string> cache;
  auto it = cache.find(t);
  if (it == cache.end()) {
    std::string s = ggml_type_name(t);
    for (auto& c : s) {
      c = (char)toupper((unsigned char)c);
    }
    it = cache.emplace(t, s).first;
  }
  return it->second.c_str();
}

// byte size of one element of a GGUF array (gguf.h keeps its own table private)
size_t gguf_elem_size(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
      return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
      return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
      return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
      return 8;
    default:
      fail("GGUF array of type %d is not numeric", (int)t);
  }
}

// Reads the GGUF's metadata and tensor types directly (gguf.h): llama.h exposes no tensor types.
json describe_model(const std::string& path, const llama_vocab* vocab, std::vector<int>& special_ids_out) {
  gguf_init_params gp = {/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* ctx = gguf_init_from_file(path.c_str(), gp);
  if (!ctx) {
    fail("%s: not a readable GGUF file", path.c_str());
  }
  struct Free {
    gguf_context* c;
    ~Free() { gguf_free(c); }
  } free_ctx{ctx};

  auto key = [&](const std::string& k) { return gguf_find_key(ctx, k.c_str()); };
  const int64_t arch_id = key("general.architecture");
  if (arch_id < 0 || gguf_get_kv_type(ctx, arch_id) != GGUF_TYPE_STRING) {
    fail("%s: no general.architecture", path.c_str());
  }
  const std::string arch = gguf_get_val_str(ctx, arch_id);

  // a scalar number, or for a per-layer array its largest element (lfm2moe: head_count_kv is 0 on conv
  // layers)
  auto num = [&](const std::string& k, bool& found) -> double {
    const int64_t id = key(k);
    found = id >= 0;
    if (!found) {
      return 0;
    }
    auto scalar = [&](gguf_type t, const void* p) -> double {
      switch (t) {
        case GGUF_TYPE_UINT8:
          return *(const uint8_t*)p;
        case GGUF_TYPE_INT8:
          return *(const int8_t*)p;
        case GGUF_TYPE_UINT16:
          return *(const uint16_t*)p;
        case GGUF_TYPE_INT16:
          return *(const int16_t*)p;
        case GGUF_TYPE_UINT32:
          return *(const uint32_t*)p;
        case GGUF_TYPE_INT32:
          return *(const int32_t*)p;
        case GGUF_TYPE_UINT64:
          return (double)*(const uint64_t*)p;
        case GGUF_TYPE_INT64:
          return (double)*(const int64_t*)p;
        case GGUF_TYPE_FLOAT32:
          return *(const float*)p;
        case GGUF_TYPE_FLOAT64:
          return *(const double*)p;
        case GGUF_TYPE_BOOL:
          return *(const int8_t*)p;
        default:
          fail("%s: key %s is not a number", path.c_str(), k.c_str());
      }
    };
    const gguf_type t = gguf_get_kv_type(ctx, id);
    if (t == GGUF_TYPE_ARRAY) {
      const gguf_type at = gguf_get_arr_type(ctx, id);
      const size_t n = gguf_get_arr_n(ctx, id);
      const auto* p = (const uint8_t*)gguf_get_arr_data(ctx, id);
      double mx = 0;
      for (size_t i = 0; i < n; i++) {
        mx = std::max(mx, scalar(at, p + i * gguf_elem_size(at)));
      }
      return mx;
    }
    return scalar(t, gguf_get_val_data(ctx, id));
  };
  auto per_layer_nonzero = [&](const std::string& k) {
    json a = json::array();
    const int64_t id = key(k);
    if (id >= 0 && gguf_get_kv_type(ctx, id) == GGUF_TYPE_ARRAY) {
      const gguf_type at = gguf_get_arr_type(ctx, id);
      const size_t n = gguf_get_arr_n(ctx, id);
      const auto* p = (const uint8_t*)gguf_get_arr_data(ctx, id);
      for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        memcpy(&v, p + i * gguf_elem_size(at), std::min<size_t>(8, gguf_elem_size(at)));
        if (v != 0) {
          a.push_back((int)i);
        }
      }
    }
    return a;
  };
  bool f;
  auto as_int = [&](const std::string& k) -> json {
    const double v = num(k, f);
    return f ? json((int64_t)v) : json(nullptr);
  };
  auto as_f32 = [&](const std::string& k) -> json {
    const double v = num(k, f);
    return f ? json((double)(float)v) : json(nullptr);
  };
  const std::string A = arch + ".";

  json shape;
  shape["arch"] = arch;
  shape["n_layer"] = as_int(A + "block_count");
  shape["n_embd"] = as_int(A + "embedding_length");
  shape["n_head"] = as_int(A + "attention.head_count");
  shape["n_head_kv"] = as_int(A + "attention.head_count_kv");
  json head_dim = as_int(A + "attention.key_length");
  if (head_dim.is_null() && shape["n_head"].is_number() && shape["n_embd"].is_number() &&
      shape["n_head"].get<int64_t>() > 0) {
    head_dim = shape["n_embd"].get<int64_t>() / shape["n_head"].get<int64_t>();
  }
  shape["head_dim"] = head_dim;
  shape["n_expert"] = as_int(A + "expert_count");
  shape["n_expert_used"] = as_int(A + "expert_used_count");
  shape["n_ff_exp"] = as_int(A + "expert_feed_forward_length");
  shape["n_ff"] = as_int(A + "feed_forward_length");
  shape["n_vocab"] = llama_vocab_n_tokens(vocab);
  shape["n_ctx_train"] = as_int(A + "context_length");
  shape["rope_theta"] = as_f32(A + "rope.freq_base");
  shape["rms_eps"] = as_f32(A + "attention.layer_norm_rms_epsilon");
  // filled in by `make` from the MoE layers llama.cpp's graph shows (leading_dense_block_count where present)
  shape["n_dense_lead"] = as_int(A + "leading_dense_block_count");
  // hybrid models (per-layer head_count_kv): the attention layers; [] when head_count_kv is one number
  shape["attn_layers"] = per_layer_nonzero(A + "attention.head_count_kv");
  shape["conv_l_cache"] = as_int(A + "shortconv.l_cache");
  json swa = as_int(A + "attention.sliding_window");
  shape["n_swa"] = swa.is_null() ? json(0) : swa;
  const int64_t name_id = key("general.name");
  shape["name"] = name_id >= 0 ? json(gguf_get_val_str(ctx, name_id)) : json(nullptr);

  // block types per tensor group: the most common type of each group (first seen wins a tie)
  std::map<std::string, std::vector<std::string>> groups;
  const int64_t nt = gguf_get_n_tensors(ctx);
  for (int64_t i = 0; i < nt; i++) {
    const std::string name = gguf_get_tensor_name(ctx, i);
    const std::string type = ggml_type_label(gguf_get_tensor_type(ctx, i));
    if (name == "token_embd.weight") {
      groups["token_embd"].push_back(type);
    } else if (name == "output.weight") {
      groups["output"].push_back(type);
    } else if (name.rfind("blk.", 0) == 0 && name.size() > 7 && name.substr(name.size() - 7) == ".weight") {
      if (name.find("_exps.") != std::string::npos) {
        groups["experts"].push_back(type);
      } else if (name.find("norm") == std::string::npos && name.find("ffn_gate_inp") == std::string::npos &&
                 name.find("exp_probs_b") == std::string::npos &&
                 name.find("conv.weight") == std::string::npos && name.find("sinks") == std::string::npos) {
        groups["matmul"].push_back(type);
      }
    }
  }
  auto mode = [&](const char* g) -> json {
    auto it = groups.find(g);
    if (it == groups.end()) {
      return nullptr;
    }
    std::map<std::string, int> cnt;
    std::string best;
    int bestc = 0;
    for (const auto& t : it->second) {
      if (++cnt[t] > bestc) {
        bestc = cnt[t];
        best = t;
      }
    }
    return best;
  };
  json types;
  types["matmul"] = mode("matmul");
  types["token_embd"] = mode("token_embd");
  types["output"] = mode("output");
  types["experts"] = mode("experts");

  // every scalar metadata key of the architecture, verbatim (new architectures carry keys the shape above
  // lacks)
  json meta;
  for (int64_t i = 0; i < gguf_get_n_kv(ctx); i++) {
    const std::string k = gguf_get_key(ctx, i);
    if (k.rfind(A, 0) != 0) {
      continue;
    }
    const gguf_type t = gguf_get_kv_type(ctx, i);
    if (t == GGUF_TYPE_STRING) {
      meta[k] = gguf_get_val_str(ctx, i);
    } else if (t == GGUF_TYPE_ARRAY) {
      const gguf_type at = gguf_get_arr_type(ctx, i);
      if (at == GGUF_TYPE_STRING) {
        continue;
      }
      json a = json::array();
      const auto* p = (const uint8_t*)gguf_get_arr_data(ctx, i);
      for (size_t j = 0; j < gguf_get_arr_n(ctx, i); j++) {
        const uint8_t* q = p + j * gguf_elem_size(at);
        if (at == GGUF_TYPE_FLOAT32) {
          a.push_back((double)*(const float*)q);
        } else if (at == GGUF_TYPE_FLOAT64) {
          a.push_back(*(const double*)q);
        } else {
          int64_t v = 0;
          memcpy(&v, q, std::min<size_t>(8, gguf_elem_size(at)));
          a.push_back(v);
        }
      }
      meta[k] = a;
    } else if (t == GGUF_TYPE_FLOAT32) {
      meta[k] = (double)gguf_get_val_f32(ctx, i);
    } else if (t == GGUF_TYPE_FLOAT64) {
      meta[k] = gguf_get_val_f64(ctx, i);
    } else if (t == GGUF_TYPE_BOOL) {
      meta[k] = gguf_get_val_bool(ctx, i);
    } else {
      meta[k] = (int64_t)num(k, f);
    }
  }

  // special ids: every token the GGUF does not mark NORMAL (1), in id order (control, user-defined, unknown)
  const int64_t tt_id = key("tokenizer.ggml.token_type");
  const int64_t tk_id = key("tokenizer.ggml.tokens");
  json special;
  special_ids_out.clear();
  if (tt_id >= 0 && tk_id >= 0 && gguf_get_arr_type(ctx, tt_id) == GGUF_TYPE_INT32) {
    const auto* tt = (const int32_t*)gguf_get_arr_data(ctx, tt_id);
    for (size_t i = 0; i < gguf_get_arr_n(ctx, tt_id); i++) {
      if (tt[i] != 1 && tt[i] != 6) {  // 1 NORMAL, 6 BYTE
        special[gguf_get_arr_str(ctx, tk_id, i)] = (int)i;
        special_ids_out.push_back((int)i);
      }
    }
  }

  json m;
  m["file"] = fs::path(path).filename().string();
  m["bytes"] = (int64_t)fs::file_size(path);
  m["sha256"] = sha256_file(path);
  m["arch"] = arch;
  m["regenerate"] = nullptr;
  m["shape"] = shape;
  m["types"] = types;
  m["numerics"] = nullptr;
  m["special_ids"] = special;
  m["n_vocab"] = llama_vocab_n_tokens(vocab);
  m["gguf_metadata"] = meta;
  return m;
}

int cmd_text(const std::string& model_path, const std::string& texts_path, const std::string& out_path) {
  const json texts = read_json(texts_path);
  ModelHolder mh;
  mh.model = load_model(model_path, /*vocab_only=*/true, true);
  const llama_vocab* vocab = llama_model_get_vocab(mh.model);
  const bool add_bos = llama_vocab_get_add_bos(vocab);
  const bool add_eos = llama_vocab_get_add_eos(vocab);
  const llama_token bos = llama_vocab_bos(vocab);
  const llama_token eos = llama_vocab_eos(vocab);

  json out;
  std::vector<int> special_ids;
  out["model"] = describe_model(model_path, vocab, special_ids);

  // --- tokenizer ---
  json tok;
  tok["source"] =
      "llama.cpp llama_tokenize(vocab, text, add_special=false, parse_special=false) -> ids; "
      "parse_special=true -> ids_parse_special (only for texts holding special-token strings); "
      "llama_detokenize(vocab, ids, remove_special, unparse_special) -> text (text_hex: its exact bytes)";
  tok["add_bos"] = add_bos;
  tok["add_eos"] = add_eos;
  tok["bos_id"] = bos;
  tok["eos_id"] = eos;
  json cases = json::array();
  for (const auto& c : texts.at("tokenizer_cases")) {
    const std::string text = c.at("text");
    json o;
    o["name"] = c.at("name");
    o["text"] = text;
    o["ids"] = ids_json(tokenize(vocab, text, false, false));
    if (c.value("parse_special", false)) {
      o["ids_parse_special"] = ids_json(tokenize(vocab, text, false, true));
    }
    cases.push_back(o);
  }
  tok["cases"] = cases;

  // detokenize cases: the ids come from recipes, since ids differ per vocabulary
  auto single = [&](const std::string& s) -> llama_token {
    const auto v = tokenize(vocab, s, false, true);
    return v.size() == 1 ? v[0] : LLAMA_TOKEN_NULL;
  };
  std::string specials_text;
  const json& dt = texts.at("detokenize");
  if (single("<|im_start|>") != LLAMA_TOKEN_NULL && single("<|im_end|>") != LLAMA_TOKEN_NULL) {
    specials_text = dt.at("specials_text_chatml");
  } else if (single("<|start|>") != LLAMA_TOKEN_NULL && single("<|message|>") != LLAMA_TOKEN_NULL &&
             single("<|end|>") != LLAMA_TOKEN_NULL) {
    specials_text = dt.at("specials_text_harmony");
  } else {
    // neither ChatML nor harmony: the template's own rendering of one user turn "hi"
    auto tmpls = common_chat_templates_init(mh.model, "");
    common_chat_templates_inputs in;
    common_chat_msg msg;
    msg.role = "user";
    msg.content = "hi";
    in.messages = {msg};
    in.use_jinja = true;
    in.add_generation_prompt = false;
    specials_text = common_chat_templates_apply(tmpls.get(), in).prompt;
  }
  // partial_utf8: the bytes f0 9f (the first half of an emoji) as one token where the vocabulary has one (the
  // shipped vocabularies do), else as its two byte tokens
  auto token_for_bytes = [&](const std::string& bytes) -> llama_token {
    for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++) {
      if (detokenize(vocab, {t}, false, false) == bytes) {
        return t;
      }
    }
    return LLAMA_TOKEN_NULL;
  };
  std::vector<llama_token> partial;
  if (const llama_token t = token_for_bytes("\xf0\x9f"); t != LLAMA_TOKEN_NULL) {
    partial = {t};
  } else {
    const llama_token t0 = token_for_bytes("\xf0"), t1 = token_for_bytes("\x9f");
    if (t0 == LLAMA_TOKEN_NULL || t1 == LLAMA_TOKEN_NULL) {
      fail(
          "no token or byte tokens of this vocabulary detokenize to the bytes f0 9f (the partial_utf8 case)");
    }
    partial = {t0, t1};
  }
  std::vector<llama_token> sp = tokenize(vocab, specials_text, false, true);
  sp.insert(sp.begin(), bos);
  std::vector<llama_token> hello = tokenize(vocab, "Hello", false, false);
  hello.insert(hello.begin(), bos);
  hello.push_back(eos);
  struct Detok {
    const char* name;
    std::vector<llama_token> ids;
    bool rm, unparse;
  };
  const std::vector<Detok> dcases = {
      {"unicode_round_trip", tokenize(vocab, dt.at("unicode_round_trip"), false, false), false, false},
      {"leading_spaces", tokenize(vocab, dt.at("leading_spaces"), false, false), false, false},
      {"specials_hidden", sp, false, false},
      {"specials_shown", sp, false, true},
      {"bos_eos_removed", hello, true, true},
      {"partial_utf8", partial, false, false},
  };
  json dj = json::array();
  for (const auto& d : dcases) {
    const std::string text = detokenize(vocab, d.ids, d.rm, d.unparse);
    json o;
    o["name"] = d.name;
    o["ids"] = ids_json(d.ids);
    o["remove_special"] = d.rm;
    o["unparse_special"] = d.unparse;
    o["text"] = utf8_sanitize(text);
    o["text_hex"] = hex(text);
    dj.push_back(o);
  }
  tok["detokenize"] = dj;
  out["tokenizer"] = tok;

  // --- chat ---
  const char* tmpl_src = llama_model_chat_template(mh.model, nullptr);
  if (!tmpl_src) {
    fail("%s has no tokenizer.chat_template (the chat cases and the long prompt need one)",
         model_path.c_str());
  }
  auto tmpls = common_chat_templates_init(mh.model, "");
  auto render = [&](const json& messages) {
    common_chat_templates_inputs in;  // defaults: enable_thinking true, no tools, no grammar
    for (const auto& m : messages) {
      common_chat_msg msg;
      msg.role = m.at("role");
      msg.content = m.at("content");
      in.messages.push_back(msg);
    }
    in.use_jinja = true;
    in.add_generation_prompt = true;
    return common_chat_templates_apply(tmpls.get(), in).prompt;
  };
  json chat;
  chat["source"] =
      "llama.cpp common_chat_templates_apply() from libllama-common (the path llama-server and "
      "llama-cli use, use_jinja=true, add_generation_prompt=true, enable_thinking default true) with "
      "the GGUF's own tokenizer.chat_template; prompt_ids = llama_tokenize(prompt, add_special=<vocab "
      "add_bos>, parse_special=true) as llama-server tokenizes a rendered chat prompt";
  chat["note"] =
      "when the vocab adds BOS itself (add_bos=true), llama.cpp strips a leading bos_token that the "
      "template rendered, so 'prompt' lacks it and prompt_ids start with the BOS id";
  chat["chat_template"] = tmpl_src;
  json cc = json::array();
  for (const auto& c : texts.at("chat_cases")) {
    const std::string prompt = render(c.at("messages"));
    json o;
    o["name"] = c.at("name");
    o["messages"] = c.at("messages");
    o["add_generation_prompt"] = true;
    o["prompt"] = prompt;
    o["prompt_ids"] = ids_json(tokenize(vocab, prompt, add_bos, true));
    cc.push_back(o);
  }
  chat["cases"] = cc;
  out["chat"] = chat;

  // --- prompts: the token ids the generation / teacher-forced / layers sections run on ---
  const json& pr = texts.at("prompts");
  json prompts, prompt_ids;
  for (const char* name : {"short", "medium", "long"}) {
    const json& p = pr.at(name);
    const size_t n = p.at("n_tokens");
    std::vector<llama_token> ids;
    json o;
    if (p.contains("text")) {
      ids = tokenize(vocab, p.at("text"), add_bos, false);
      o["text"] = p.at("text");
      o["how"] = "llama_tokenize(text, add_special=<vocab add_bos>, parse_special=false), first " +
                 std::to_string(n) + " ids";
    } else {
      ids = tokenize(vocab, render(p.at("messages")), add_bos, true);
      o["messages"] = p.at("messages");
      o["how"] = "chat-rendered (as in 'chat') then tokenized with parse_special=true, first " +
                 std::to_string(n) + " ids";
    }
    if (ids.size() < n) {
      fail("prompt '%s' gives only %zu tokens with this vocabulary, %zu needed", name, ids.size(), n);
    }
    ids.resize(n);
    prompts[name] = o;
    prompt_ids[name] = ids_json(ids);
  }
  out["prompts"] = prompts;
  out["prompt_ids"] = prompt_ids;
  write_json(out_path, out);
  return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// `run`: greedy generations and teacher-forced batches on one CPU path
// ---------------------------------------------------------------------------------------------------------------

// What cb_eval collects during one teacher-forced batch. Layer numbers N come from the graph tensor names
// ("l_out-N", "ffn_moe_topk-N", "ffn_moe_argsort-N"), so no architecture knowledge is needed here.
struct Capture {
  std::map<int, std::vector<float>> l_out;   // N -> [rows][n_embd]
  std::map<int, std::vector<int32_t>> topk;  // N -> [rows][k], llama.cpp's selection order
  std::map<int, std::vector<float>> scores;  // N -> [rows][n_expert]: the values the top-k was taken of
  std::map<int, std::string> score_name;     // N -> name of that tensor (ffn_moe_probs, ..._biased, ...)
  int64_t n_embd = 0, k = 0, n_expert = 0;
  std::string error;
};

bool split_name(const char* name, std::string& prefix, int& layer) {
  const char* dash = strrchr(name, '-');
  if (!dash || !dash[1]) {
    return false;
  }
  char* end = nullptr;
  long v = strtol(dash + 1, &end, 10);
  if (*end != '\0') {
    return false;
  }
  prefix.assign(name, dash - name);
  layer = (int)v;
  return true;
}

// Reads rows [ne1] of ne0 elements of a 2-D (possibly strided) tensor.
template <typename T>
std::vector<T> read_rows(const ggml_tensor* t) {
  if (ggml_nelements(t) != t->ne[0] * t->ne[1]) {
    fail("tensor %s is not 2-D", t->name);
  }
  std::vector<T> out((size_t)(t->ne[0] * t->ne[1]));
  for (int64_t r = 0; r < t->ne[1]; r++) {
    ggml_backend_tensor_get(t, out.data() + r * t->ne[0], r * t->nb[1], t->ne[0] * sizeof(T));
  }
  return out;
}

bool capture_cb(ggml_tensor* t, bool ask, void* ud) {
  auto* cap = (Capture*)ud;
  std::string prefix;
  int layer;
  if (!split_name(t->name, prefix, layer)) {
    return ask ? false : true;
  }
  const bool wanted = prefix == "l_out" || prefix == "ffn_moe_topk" || prefix == "ffn_moe_argsort";
  if (ask) {
    return wanted;
  }
  if (!wanted) {
    return true;
  }
  try {
    if (prefix == "l_out") {
      if (t->type != GGML_TYPE_F32) {
        fail("%s is %s, not f32", t->name, ggml_type_name(t->type));
      }
      cap->n_embd = t->ne[0];
      cap->l_out[layer] = read_rows<float>(t);
    } else if (prefix == "ffn_moe_topk") {
      if (t->type != GGML_TYPE_I32) {
        fail("%s is %s, not i32", t->name, ggml_type_name(t->type));
      }
      cap->k = t->ne[0];
      cap->topk[layer] = read_rows<int32_t>(t);
    } else {
      // ffn_moe_argsort-N sorts the selection scores: its source is the tensor whose values decide the
      // choice (softmax probs, sigmoid + exp_probs_b, router logits + bias, group-masked probs, ...). The
      // source was computed before the argsort and is not overwritten before this callback returns (the
      // scheduler runs no later node before calling back, and ARGSORT never works in place).
      const ggml_tensor* s = t->src[0];
      if (!s || s->type != GGML_TYPE_F32) {
        fail("%s: source is not an f32 tensor", t->name);
      }
      cap->n_expert = s->ne[0];
      cap->scores[layer] = read_rows<float>(s);
      cap->score_name[layer] = s->name;
    }
  } catch (const std::exception& e) {
    cap->error = e.what();
    return false;  // stops the graph; decode then reports failure
  }
  return true;
}

llama_context* make_ctx(llama_model* model, int n_ctx, int threads, Capture* cap) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;  // llama.cpp pads it to 256; n_batch = min(n_ctx, 2048) >= prompt
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = GGML_TYPE_F16;
  cp.type_v = GGML_TYPE_F16;
  cp.no_perf = true;
  if (cap) {
    cp.cb_eval = capture_cb;
    cp.cb_eval_user_data = cap;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fail("llama_init_from_model failed (n_ctx %d)", n_ctx);
  }
  return ctx;
}

void decode_or_fail(llama_context* ctx, const std::vector<llama_token>& toks, int pos0, bool all_logits,
                    Capture* cap) {
  llama_batch b = llama_batch_init((int32_t)toks.size(), 0, 1);
  for (size_t i = 0; i < toks.size(); i++) {
    b.token[i] = toks[i];
    b.pos[i] = pos0 + (int)i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all_logits || i + 1 == toks.size();
  }
  b.n_tokens = (int32_t)toks.size();
  const int r = llama_decode(ctx, b);
  llama_batch_free(b);
  if (cap && !cap->error.empty()) {
    fail("reading graph tensors: %s", cap->error.c_str());
  }
  if (r != 0) {
    fail("llama_decode returned %d", r);
  }
}

int argmax_lowest(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++) {
    if (x[i] > x[best]) {  // strict: the lowest id wins an exact tie
      best = i;
    }
  }
  return best;
}

int cmd_run(const std::string& model_path, const std::string& jobs_path, const std::string& out_dir,
            const std::string& backend, bool no_repack, int threads) {
  const json jobs = read_json(jobs_path);
  fs::create_directories(out_dir);

  // The CPU backend: "auto" = what llama.cpp's own tools do (ggml_backend_load_all: the variant with the best
  // score for this CPU); otherwise one named variant file, loaded alone.
  const std::string dir = prebuilt_dir();
  if (backend == "auto") {
    ggml_backend_load_all_from_path(dir.c_str());
  } else {
    const std::string lib = dir + "/libggml-cpu-" + backend + ".so";
    if (!fs::exists(lib)) {
      fail("no CPU variant %s", lib.c_str());
    }
    if (!ggml_backend_load(lib.c_str())) {
      fail("ggml_backend_load(%s) failed (does this CPU support it?)", lib.c_str());
    }
  }
  if (ggml_backend_reg_count() == 0) {
    fail("no ggml backend could be loaded from %s", dir.c_str());
  }

  ModelHolder mh;
  mh.model = load_model(model_path, false, !no_repack);
  const llama_vocab* vocab = llama_model_get_vocab(mh.model);
  const int V = llama_vocab_n_tokens(vocab);

  json out;
  out["system_info"] = llama_print_system_info();
  out["cpu_variant"] = loaded_cpu_variant();
  out["threads"] = threads;
  out["repack"] = !no_repack;
  out["n_vocab"] = V;

  // greedy generations: the prompt as one batch (logits of its last row only, as llama-cli / llama-server
  // request them), then one token per llama_decode
  json gen_out = json::object();
  std::map<std::string, std::vector<llama_token>> gen_ids;
  for (const auto& g : jobs.value("gen", json::array())) {
    const std::string name = g.at("name");
    const auto prompt = ids_from(g.at("prompt"));
    const int n_pred = g.at("n_predict");
    llama_context* ctx = make_ctx(mh.model, (int)prompt.size() + n_pred + 16, threads, nullptr);
    std::vector<float> logits;
    std::vector<llama_token> ids;
    try {
      decode_or_fail(ctx, prompt, 0, false, nullptr);
      for (int step = 0; step < n_pred; step++) {
        const float* l = llama_get_logits_ith(ctx, -1);
        if (!l) {
          fail("no logits at step %d", step);
        }
        logits.insert(logits.end(), l, l + V);
        const llama_token t = argmax_lowest(l, V);
        ids.push_back(t);
        if (step + 1 < n_pred) {
          decode_or_fail(ctx, {t}, (int)prompt.size() + step, false, nullptr);
        }
      }
    } catch (...) {
      llama_free(ctx);
      throw;
    }
    llama_free(ctx);
    write_vec(out_dir + "/gen." + name + ".logits.f32", logits);
    gen_ids[name] = ids;
    json o;
    o["prompt"] = g.at("prompt");
    o["ids"] = ids_json(ids);
    gen_out[name] = o;
  }
  out["gen"] = gen_out;

  // teacher-forced batches: all rows in one llama_decode, every row's logits requested (so that the last
  // layer's tensors exist for every row too), graph tensors read through cb_eval
  json tf_out = json::object();
  for (const auto& j : jobs.value("tf", json::array())) {
    const std::string name = j.at("name");
    std::vector<llama_token> toks;
    if (j.contains("tokens")) {
      toks = ids_from(j.at("tokens"));
    } else {
      // the prompt of one of this run's generations, extended by its first `extend` greedy tokens
      const std::string from = j.at("extend_gen");
      const int n = j.at("extend");
      if (!gen_ids.count(from)) {
        fail("tf job %s: no generation %s in this run", name.c_str(), from.c_str());
      }
      toks = ids_from(gen_out[from].at("prompt"));
      toks.insert(toks.end(), gen_ids[from].begin(), gen_ids[from].begin() + n);
    }
    const int T = (int)toks.size();
    const int n_ctx = j.value("n_ctx", T + 32 + 16);
    Capture cap;
    llama_context* ctx = make_ctx(mh.model, n_ctx, threads, &cap);
    std::vector<float> logits;
    try {
      decode_or_fail(ctx, toks, 0, true, &cap);
      for (int i = 0; i < T; i++) {
        const float* l = llama_get_logits_ith(ctx, i);
        if (!l) {
          fail("no logits for row %d", i);
        }
        logits.insert(logits.end(), l, l + V);
      }
    } catch (...) {
      llama_free(ctx);
      throw;
    }
    llama_free(ctx);

    // every captured tensor must cover all T rows
    std::vector<float> l_out;
    std::vector<int32_t> topk;
    std::vector<float> scores;
    json l_layers = json::array(), moe_layers = json::array(), score_names = json::array();
    for (const auto& [layer, v] : cap.l_out) {
      if ((int64_t)v.size() != (int64_t)T * cap.n_embd) {
        fail("l_out-%d has %zu values, expected %d rows x %" PRId64, layer, v.size(), T, cap.n_embd);
      }
      l_out.insert(l_out.end(), v.begin(), v.end());
      l_layers.push_back(layer);
    }
    for (const auto& [layer, v] : cap.topk) {
      if ((int64_t)v.size() != (int64_t)T * cap.k) {
        fail("ffn_moe_topk-%d has %zu values, expected %d rows x %" PRId64, layer, v.size(), T, cap.k);
      }
      if (!cap.scores.count(layer) || (int64_t)cap.scores[layer].size() != (int64_t)T * cap.n_expert) {
        fail("layer %d: ffn_moe_topk without a matching ffn_moe_argsort source (experts preselected?)",
             layer);
      }
      topk.insert(topk.end(), v.begin(), v.end());
      scores.insert(scores.end(), cap.scores[layer].begin(), cap.scores[layer].end());
      moe_layers.push_back(layer);
      score_names.push_back(cap.score_name[layer]);
    }
    write_vec(out_dir + "/tf." + name + ".logits.f32", logits);
    write_vec(out_dir + "/tf." + name + ".l_out.f32", l_out);
    write_vec(out_dir + "/tf." + name + ".topk.i32", topk);
    write_vec(out_dir + "/tf." + name + ".scores.f32", scores);
    json o;
    o["tokens"] = ids_json(toks);
    o["n_ctx"] = n_ctx;
    o["l_out_layers"] = l_layers;
    o["moe_layers"] = moe_layers;
    o["score_tensors"] = score_names;
    o["n_embd"] = cap.n_embd;
    o["k"] = cap.k;
    o["n_expert"] = cap.n_expert;
    tf_out[name] = o;
  }
  out["tf"] = tf_out;
  write_json(out_dir + "/run.json", out);
  return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// `make`: the driver
// ---------------------------------------------------------------------------------------------------------------

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

void run_child(std::vector<std::string> args, const std::string& log_path) {
  if (g_log_level == GGML_LOG_LEVEL_DEBUG) {
    args.push_back("--verbose");  // the child's full llama.cpp log then lands in log_path
  }
  fprintf(stderr, "golden_maker:");
  for (size_t i = 1; i < args.size(); i++) {
    fprintf(stderr, " %s", args[i].c_str());
  }
  fprintf(stderr, "\n");
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    fail("fork failed: %s", strerror(errno));
  }
  if (pid == 0) {
    FILE* lf = fopen(log_path.c_str(), "w");
    if (lf) {
      dup2(fileno(lf), 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) {
    fail("waitpid failed");
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string tail = read_file(log_path);
    if (tail.size() > 3000) {
      tail = tail.substr(tail.size() - 3000);
    }
    fail("child failed (status %d): %s\n--- %s (tail) ---\n%s", st, args[1].c_str(), log_path.c_str(),
         tail.c_str());
  }
}

// Rounds up to 2 significant digits (3.6007 -> 3.7, 0.0013195 -> 0.0014, 3.6 -> 3.6), via the decimal string
// so that the result is the double nearest to a 2-digit decimal.
double ceil2(double x) {
  if (x <= 0) {
    return 0.0;
  }
  const int e = (int)std::floor(std::log10(x));
  double m = x / std::pow(10.0, e - 1);  // in [10, 100)
  double r = std::round(m);
  long d = (std::fabs(m - r) <= 1e-9 * r) ? (long)r : (long)std::ceil(m);
  int ex = e - 1;
  if (d >= 100) {
    d /= 10;
    ex += 1;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%lde%d", d, ex);
  return strtod(buf, nullptr);
}

// The routing gap of one (token, MoE layer): the smallest score among the chosen experts minus the largest
// among the others (masked experts, -inf, never count as the best unchosen). Computed in double, where the
// difference of two float32 scores is exact, and rounded to float32 only when written: that is how the
// shipped fixtures computed it (their gap changes match this bit for bit, a float32 subtraction does not).
double routing_gap(const float* scores, int n_expert, const int32_t* chosen, int k) {
  std::vector<char> is_chosen(n_expert, 0);
  float kth = std::numeric_limits<float>::infinity();
  for (int i = 0; i < k; i++) {
    is_chosen[chosen[i]] = 1;
    kth = std::min(kth, scores[chosen[i]]);
  }
  float best_other = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < n_expert; e++) {
    if (!is_chosen[e]) {
      best_other = std::max(best_other, scores[e]);
    }
  }
  return (double)kth - (double)best_other;
}

struct TfData {  // one teacher-forced batch of one run
  int T = 0, V = 0, E = 0, K = 0, X = 0;
  std::vector<int> l_layers, moe_layers;
  std::vector<std::string> score_names;
  std::vector<float> logits, l_out, scores;  // [T][V], [L][T][E], [M][T][X]
  std::vector<int32_t> topk;                 // [M][T][K]
  std::vector<llama_token> tokens;

  const float* row(int t) const { return logits.data() + (size_t)t * V; }
  const float* lrow(int li, int t) const { return l_out.data() + ((size_t)li * T + t) * E; }
  const int32_t* kids(int mi, int t) const { return topk.data() + ((size_t)mi * T + t) * K; }
  const float* srow(int mi, int t) const { return scores.data() + ((size_t)mi * T + t) * X; }
  std::vector<int> sorted_ids(int mi, int t) const {
    std::vector<int> v(kids(mi, t), kids(mi, t) + K);
    std::sort(v.begin(), v.end());
    return v;
  }
  double gap(int mi, int t) const { return routing_gap(srow(mi, t), X, kids(mi, t), K); }
};

TfData load_tf(const std::string& dir, const json& run, const std::string& name) {
  const json& o = run.at("tf").at(name);
  TfData d;
  d.tokens = ids_from(o.at("tokens"));
  d.T = (int)d.tokens.size();
  d.V = run.at("n_vocab");
  d.E = o.at("n_embd");
  d.K = o.at("k");
  d.X = o.at("n_expert");
  for (const auto& x : o.at("l_out_layers")) {
    d.l_layers.push_back(x);
  }
  for (const auto& x : o.at("moe_layers")) {
    d.moe_layers.push_back(x);
  }
  for (const auto& x : o.at("score_tensors")) {
    d.score_names.push_back(x);
  }
  const size_t L = d.l_layers.size(), M = d.moe_layers.size();
  d.logits = read_vec<float>(dir + "/tf." + name + ".logits.f32", (size_t)d.T * d.V);
  d.l_out = read_vec<float>(dir + "/tf." + name + ".l_out.f32", L * d.T * d.E);
  d.topk = read_vec<int32_t>(dir + "/tf." + name + ".topk.i32", M * d.T * d.K);
  d.scores = read_vec<float>(dir + "/tf." + name + ".scores.f32", M * d.T * d.X);
  return d;
}

struct Top {
  int id;
  float v;
};

std::vector<Top> top_n(const float* x, int V, int n) {
  // descending by value, the lower id first on a tie (like the greedy argmax)
  std::vector<int> idx(V);
  for (int i = 0; i < V; i++) {
    idx[i] = i;
  }
  n = std::min(n, V);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::vector<Top> out;
  for (int i = 0; i < n; i++) {
    out.push_back({idx[i], x[idx[i]]});
  }
  return out;
}

float margin_of(const float* x, int V) {
  const auto t = top_n(x, V, 2);
  return t[0].v - t[1].v;
}

// Logit statistics of `rows` rows of a path against the reference.
struct LogitStats {
  int rows = 0;
  float max_abs = 0, p99 = 0, mean = 0, max_pair = 0;
  int agree = 0;
  std::vector<float> disagree_margins;
};

LogitStats logit_stats(const std::vector<const float*>& ref, const std::vector<const float*>& path, int V) {
  LogitStats s;
  std::vector<float> all;
  double sum = 0;
  s.rows = (int)ref.size();
  for (size_t r = 0; r < ref.size(); r++) {
    const float* a = ref[r];
    const float* b = path[r];
    for (int v = 0; v < V; v++) {
      const float d = std::fabs(b[v] - a[v]);
      all.push_back(d);
      sum += d;
      s.max_abs = std::max(s.max_abs, d);
    }
    // the change of (logit_j - logit_top) over the reference's 10 best tokens
    const auto top = top_n(a, V, 10);
    const int t0 = top[0].id;
    for (const auto& tj : top) {
      const float ch = std::fabs((b[tj.id] - b[t0]) - (a[tj.id] - a[t0]));
      s.max_pair = std::max(s.max_pair, ch);
    }
    if (argmax_lowest(a, V) == argmax_lowest(b, V)) {
      s.agree++;
    } else {
      s.disagree_margins.push_back(margin_of(a, V));
    }
  }
  if (!all.empty()) {
    // numpy.percentile(.., 99) with linear interpolation
    const double pos = 0.99 * (double)(all.size() - 1);
    const size_t lo = (size_t)std::floor(pos);
    std::nth_element(all.begin(), all.begin() + lo, all.end());
    const float vlo = all[lo];
    float vhi = vlo;
    if (lo + 1 < all.size()) {
      vhi = *std::min_element(all.begin() + lo + 1, all.end());
    }
    s.p99 = (float)(vlo + (vhi - vlo) * (pos - (double)lo));
    s.mean = (float)(sum / (double)all.size());
  }
  return s;
}

json logit_stats_json(const LogitStats& s) {
  json o;
  o["rows"] = s.rows;
  o["max_abs_logit_diff"] = f32(s.max_abs);
  o["p99_abs_logit_diff"] = f32(s.p99);
  o["mean_abs_logit_diff"] = f32(s.mean);
  o["max_pair_diff_top10"] = f32(s.max_pair);
  o["argmax_agree"] = s.agree;
  json m = json::array();
  for (float x : s.disagree_margins) {
    m.push_back(f32(x));
  }
  o["argmax_disagree_ref_margins"] = m;
  return o;
}

struct PathDef {
  const char* key;
  const char* backend;
  bool no_repack;
  int threads;
  const char* what;
};

// "ref" stands for the reference's CPU variant (--cpu, default zen4)
const PathDef kRef = {"reference", "ref", false, 1, ""};
const std::vector<PathDef> kPaths = {
    {"no_repack", "ref", true, 1,
     "same variant, --no-repack (plain ggml_vec_dot kernels, no q4_0_8x8 / q8_0 4x8 copies)"},
    {"threads2", "ref", false, 2, "same as the reference with 2 threads"},
    {"avx2", "haswell", false, 1, "libggml-cpu-haswell.so (AVX2/FMA kernels)"},
    {"sse42", "sse42", false, 1, "libggml-cpu-sse42.so (SSE4.2 kernels)"},
    {"scalar", "x64", false, 1, "libggml-cpu-x64.so (no SIMD: generic C kernels)"},
};

const char* kSeqs[3] = {"short", "medium", "long"};
const int kNPredict = 32;
const int kExtend = 31;

json float_list(const std::vector<float>& v) {
  json a = json::array();
  for (float x : v) {
    a.push_back(f32(x));
  }
  return a;
}

int cmd_make(const std::string& model_path, const std::string& name, const std::string& out_dir,
             const std::string& texts_path, const std::string& regenerate, const std::string& numerics,
             const std::string& work_arg, bool keep_work, bool reuse, const std::string& ref_cpu) {
  if (!fs::exists(model_path)) {
    fail("no such model file: %s", model_path.c_str());
  }
  if (name.empty() || name.find('/') != std::string::npos) {
    fail("bad NAME '%s' (a file name stem, no slashes)", name.c_str());
  }
  fs::create_directories(out_dir);
  const std::string work = work_arg.empty() ? out_dir + "/" + name + ".work" : work_arg;
  fs::create_directories(work);
  const std::string exe = self_exe();
  const std::string model = fs::absolute(model_path).string();

  // 1. text: tokenizer, chat, prompt ids, model description
  const std::string text_json = work + "/text.json";
  if (!(reuse && fs::exists(text_json))) {
    run_child({exe, "text", "--model", model, "--texts", texts_path, "--out", text_json}, work + "/text.log");
  }
  const json text = read_json(text_json);

  // 2. the reference path: generations, the teacher-forced and layers prompts, and the extended sequences
  json gen_jobs = json::array();
  for (const char* s : kSeqs) {
    gen_jobs.push_back({{"name", s}, {"prompt", text.at("prompt_ids").at(s)}, {"n_predict", kNPredict}});
  }
  auto run_path = [&](const PathDef& p, const json& jobs) {
    const std::string dir = work + "/" + p.key;
    if (reuse && fs::exists(dir + "/run.json")) {
      return;
    }
    fs::create_directories(dir);
    write_json(dir + "/jobs.json", jobs);
    std::vector<std::string> args = {exe,         "run",
                                     "--model",   model,
                                     "--jobs",    dir + "/jobs.json",
                                     "--out",     dir,
                                     "--backend", std::string(p.backend) == "ref" ? ref_cpu : p.backend,
                                     "--threads", std::to_string(p.threads)};
    if (p.no_repack) {
      args.push_back("--no-repack");
    }
    run_child(args, dir + "/run.log");
  };
  {
    json jobs;
    jobs["gen"] = gen_jobs;
    json tf = json::array();
    // n_ctx = prompt + n_predict + 16, as for a generation from that prompt
    tf.push_back({{"name", "teacher_forced"}, {"tokens", text.at("prompt_ids").at("medium")}});
    tf.push_back({{"name", "layers"}, {"tokens", text.at("prompt_ids").at("short")}});
    for (const char* s : kSeqs) {
      const int P = (int)text.at("prompt_ids").at(s).size();
      tf.push_back({{"name", std::string("ext_") + s},
                    {"extend_gen", s},
                    {"extend", kExtend},
                    {"n_ctx", P + kNPredict + 16}});
    }
    jobs["tf"] = tf;
    run_path(kRef, jobs);
  }
  const std::string ref_dir = work + "/reference";
  const json ref = read_json(ref_dir + "/run.json");

  // 3. the other CPU paths on the reference's token sequences
  {
    json jobs;
    jobs["gen"] = gen_jobs;
    json tf = json::array();
    for (const char* s : kSeqs) {
      const int P = (int)text.at("prompt_ids").at(s).size();
      tf.push_back({{"name", std::string("ext_") + s},
                    {"tokens", ref.at("tf").at(std::string("ext_") + s).at("tokens")},
                    {"n_ctx", P + kNPredict + 16}});
    }
    jobs["tf"] = tf;
    for (const auto& p : kPaths) {
      run_path(p, jobs);
    }
  }

  // 4. the fixture
  const int V = ref.at("n_vocab");
  const json& tm = text.at("model");
  json doc;
  doc["schema"] = "diskformer-golden/1";
  json model_j = tm;
  model_j.erase("gguf_metadata");
  if (!regenerate.empty()) {
    model_j["regenerate"] = regenerate;
  }
  if (!numerics.empty()) {
    try {
      model_j["numerics"] = json::parse(numerics);
    } catch (const json::exception& e) {
      fail("--numerics is not JSON: %s", e.what());
    }
  }

  const TfData tfd = load_tf(ref_dir, ref, "teacher_forced");
  const TfData lay = load_tf(ref_dir, ref, "layers");
  if (tfd.moe_layers.empty()) {
    fail("llama.cpp's graph shows no ffn_moe_topk-N tensor: not a MoE model?");
  }
  // n_dense_lead: leading_dense_block_count where the GGUF has it, else the layers before the first MoE layer
  if (model_j["shape"]["n_dense_lead"].is_null()) {
    model_j["shape"]["n_dense_lead"] = tfd.moe_layers.front();
  }
  model_j["gguf_metadata"] = tm.at("gguf_metadata");
  doc["model"] = model_j;

  const std::string variant = ref.at("cpu_variant");
  json reference;
  reference["engine"] = "llama.cpp";
  reference["llama_cpp_release"] =
      "v0.4.0 (ggml-org/llama.cpp tag, source commit 80fb11ac73e66d89eae2c6a91d8a77428fa733ed)";
  reference["distribution"] =
      "node-llama-cpp 3.21.1 prebuilt @node-llama-cpp/linux-x64 3.21.1 "
      "(libllama.v0.4.0.so, libllama-common.so)";
  reference["backend"] = ref_cpu == "auto" ? "CPU only (ggml_backend_load_all picked " + variant + ")"
                                           : "CPU only (" + variant +
                                                 ", loaded by name: the variant the "
                                                 "shipped fixtures were made with)";
  reference["threads"] = 1;
  reference["weights"] = "mmap, default weight repacking (use_extra_bufts = true)";
  reference["attention"] = "flash attention off";
  reference["sampling"] = "greedy: argmax of the raw logits, lowest id wins exact ties";
  reference["system_info"] = ref.at("system_info");
  doc["reference"] = reference;
  doc["tokenizer"] = text.at("tokenizer");
  doc["chat"] = text.at("chat");
  doc["prompts"] = text.at("prompts");

  // --- generation ---
  std::map<std::string, std::vector<float>> ref_gen_logits;
  std::map<std::string, std::vector<float>> ref_step_margin;
  json gens = json::array();
  for (const char* s : kSeqs) {
    const auto prompt = ids_from(text.at("prompt_ids").at(s));
    const auto ids = ids_from(ref.at("gen").at(s).at("ids"));
    auto logits = read_vec<float>(ref_dir + "/gen." + s + ".logits.f32", (size_t)kNPredict * V);
    json steps = json::array();
    float min_margin = std::numeric_limits<float>::infinity();
    for (int i = 0; i < kNPredict; i++) {
      const float* row = logits.data() + (size_t)i * V;
      const auto t5 = top_n(row, V, 5);
      const float m = t5[0].v - t5[1].v;
      if (t5[0].id != ids[i]) {
        fail("internal: greedy id mismatch at %s step %d", s, i);
      }
      ref_step_margin[s].push_back(m);
      min_margin = std::min(min_margin, m);
      json top5 = json::array();
      for (const auto& t : t5) {
        top5.push_back(json::array({t.id, f32(t.v)}));
      }
      json st;
      st["step"] = i;
      st["pos"] = (int)prompt.size() - 1 + i;
      st["token"] = ids[i];
      st["margin"] = f32(m);
      st["top5"] = top5;
      steps.push_back(st);
    }
    json g;
    g["name"] = s;
    g["prompt_ids"] = ids_json(prompt);
    g["n_predict"] = kNPredict;
    g["generated_ids"] = ids_json(ids);
    g["min_margin"] = f32(min_margin);
    g["steps"] = steps;
    gens.push_back(g);
    ref_gen_logits[s] = std::move(logits);
  }
  doc["generation"] = gens;

  // --- spread: the other paths against the reference on the extended sequences ---
  std::map<std::string, TfData> ref_ext;
  for (const char* s : kSeqs) {
    ref_ext[s] = load_tf(ref_dir, ref, std::string("ext_") + s);
  }
  const size_t L = ref_ext["short"].l_layers.size();
  const size_t M = ref_ext["short"].moe_layers.size();

  json paths_j = json::object();
  float all_max_abs = 0, all_max_pair = 0, all_max_gap = 0;
  std::vector<float> all_lout(L, 0.f), all_lout_tok(L, 0.f);
  json repack_j;
  float repack_max_abs = 0, repack_max_pair = 0;
  std::vector<std::string> same_ids_paths, diff_ids_paths;
  for (const auto& p : kPaths) {
    const std::string dir = work + "/" + p.key;
    const json run = read_json(dir + "/run.json");
    // greedy ids
    bool greedy_equal = true;
    json first_div = json::array();
    for (const char* s : kSeqs) {
      const auto a = ids_from(ref.at("gen").at(s).at("ids"));
      const auto b = ids_from(run.at("gen").at(s).at("ids"));
      int d = -1;
      for (int i = 0; i < kNPredict; i++) {
        if (a[i] != b[i]) {
          d = i;
          break;
        }
      }
      if (d >= 0) {
        greedy_equal = false;
        first_div.push_back(json::array({s, d, f32(ref_step_margin[s][d])}));
      } else {
        first_div.push_back(json::array({s, nullptr, nullptr}));
      }
    }
    (greedy_equal ? same_ids_paths : diff_ids_paths).push_back(p.key);

    json per_seq = json::array();
    float max_abs = 0, max_pair = 0, max_gap = 0, max_dis_margin = 0;
    bool any_dis = false;
    int n_dis = 0, rows = 0, decisions = 0, differ = 0;
    std::vector<float> lout(L, 0.f), lout_tok(L, 0.f);
    json flips_all = json::array();
    for (const char* s : kSeqs) {
      const TfData& R = ref_ext[s];
      const TfData P = load_tf(dir, run, std::string("ext_") + s);
      if (P.tokens != R.tokens || P.moe_layers != R.moe_layers || P.l_layers != R.l_layers) {
        fail("path %s, %s: tokens or layers differ from the reference run", p.key, s);
      }
      // expert choices and routing gaps over every row; the first flip (a routing near-tie where this path
      // chose another set) ends the rows that the logit and l_out statistics use
      int first_flip = -1, seq_differ = 0;
      double seq_gap = 0;
      json flips = json::array();
      for (int t = 0; t < R.T; t++) {
        for (size_t mi = 0; mi < M; mi++) {
          const bool same = R.sorted_ids((int)mi, t) == P.sorted_ids((int)mi, t);
          if (!same) {
            seq_differ++;
            if (first_flip < 0) {
              first_flip = t;
            }
            flips.push_back(json::array({t, R.moe_layers[mi], f32(R.gap((int)mi, t))}));
            flips_all.push_back(json::array({t, R.moe_layers[mi], f32(R.gap((int)mi, t)), s}));
          }
          // change of the reference's boundary gap: the same two experts' scores in this path
          const double g_ref = R.gap((int)mi, t);
          const double g_path = routing_gap(P.srow((int)mi, t), P.X, R.kids((int)mi, t), R.K);
          seq_gap = std::max(seq_gap, std::fabs(g_path - g_ref));
        }
      }
      const int n_rows = first_flip < 0 ? R.T : first_flip;
      std::vector<const float*> ra, pa;
      for (int t = 0; t < n_rows; t++) {
        ra.push_back(R.row(t));
        pa.push_back(P.row(t));
      }
      const LogitStats ls = logit_stats(ra, pa, V);
      json o = logit_stats_json(ls);
      o["expert_decisions"] = R.T * (int)M;
      o["expert_choices_differ"] = seq_differ;
      o["expert_flips"] = flips;
      o["first_flip_token"] = first_flip < 0 ? json(nullptr) : json(first_flip);
      o["max_boundary_gap_change"] = f32(seq_gap);
      std::vector<float> sl(L), st(L);
      for (size_t li = 0; li < L; li++) {
        double num = 0, den = 0;
        float tok_max = 0;
        for (int t = 0; t < n_rows; t++) {
          double tn = 0, td = 0;
          for (int e = 0; e < R.E; e++) {
            const double a = R.lrow((int)li, t)[e], b = P.lrow((int)li, t)[e];
            tn += (b - a) * (b - a);
            td += a * a;
          }
          num += tn;
          den += td;
          tok_max = std::max(tok_max, (float)std::sqrt(tn / td));
        }
        sl[li] = (float)std::sqrt(num / den);
        st[li] = tok_max;
        lout[li] = std::max(lout[li], sl[li]);
        lout_tok[li] = std::max(lout_tok[li], st[li]);
      }
      o["l_out_rel_l2"] = float_list(sl);
      o["l_out_max_token_rel_l2"] = float_list(st);
      o["sequence"] = s;
      per_seq.push_back(o);

      max_abs = std::max(max_abs, ls.max_abs);
      max_pair = std::max(max_pair, ls.max_pair);
      max_gap = std::max(max_gap, (float)seq_gap);
      rows += ls.rows;
      n_dis += (int)ls.disagree_margins.size();
      for (float m : ls.disagree_margins) {
        max_dis_margin = any_dis ? std::max(max_dis_margin, m) : m;
        any_dis = true;
      }
      decisions += R.T * (int)M;
      differ += seq_differ;
    }
    json o;
    o["what"] = p.what;
    o["greedy_ids_equal_to_reference"] = greedy_equal;
    o["greedy_first_divergence_step_and_ref_margin"] = first_div;
    o["max_abs_logit_diff"] = f32(max_abs);
    o["max_pair_diff_top10"] = f32(max_pair);
    o["argmax_disagreements"] = n_dis;
    o["max_ref_margin_at_argmax_disagreement"] = nullable_f32(any_dis, max_dis_margin);
    o["rows"] = rows;
    o["expert_decisions"] = decisions;
    o["expert_choices_differ"] = differ;
    o["expert_flips_token_layer_refgap"] = flips_all;
    o["max_boundary_gap_change"] = f32(max_gap);
    o["l_out_rel_l2"] = float_list(lout);
    o["l_out_max_token_rel_l2"] = float_list(lout_tok);
    o["per_sequence"] = per_seq;
    if (run.at("cpu_variant") != ref.at("cpu_variant") && std::string(p.backend) == "ref") {
      fail("path %s ran on %s, the reference on %s", p.key, run.at("cpu_variant").get<std::string>().c_str(),
           ref.at("cpu_variant").get<std::string>().c_str());
    }
    o["cpu_variant"] = run.at("cpu_variant");
    paths_j[p.key] = o;

    all_max_abs = std::max(all_max_abs, max_abs);
    all_max_pair = std::max(all_max_pair, max_pair);
    all_max_gap = std::max(all_max_gap, max_gap);
    for (size_t li = 0; li < L; li++) {
      all_lout[li] = std::max(all_lout[li], lout[li]);
      all_lout_tok[li] = std::max(all_lout_tok[li], lout_tok[li]);
    }
    if (std::string(p.key) == "no_repack") {
      repack_max_abs = max_abs;
      repack_max_pair = max_pair;
      repack_j["max_abs_logit_diff"] = f32(max_abs);
      repack_j["max_pair_diff_top10"] = f32(max_pair);
      repack_j["l_out_rel_l2"] = float_list(lout);
      repack_j["expert_choices_differ"] = differ;
      repack_j["expert_decisions"] = decisions;
    }
  }

  // decode vs batched: the reference's greedy steps (step 0 from the prompt batch, then single-token decodes)
  // against the same positions of its batched extended sequence
  json dvb_seq = json::array();
  float dvb_max_abs = 0, dvb_max_pair = 0, dvb_max_margin = 0;
  int dvb_dis = 0, dvb_rows = 0;
  bool dvb_any = false;
  for (const char* s : kSeqs) {
    const TfData& R = ref_ext[s];
    const int P = (int)text.at("prompt_ids").at(s).size();
    std::vector<const float*> batched, decoded;
    for (int i = 0; i < kNPredict; i++) {
      batched.push_back(R.row(P - 1 + i));
      decoded.push_back(ref_gen_logits[s].data() + (size_t)i * V);
    }
    const LogitStats ls = logit_stats(batched, decoded, V);
    json o = logit_stats_json(ls);
    o["sequence"] = s;
    dvb_seq.push_back(o);
    dvb_max_abs = std::max(dvb_max_abs, ls.max_abs);
    dvb_max_pair = std::max(dvb_max_pair, ls.max_pair);
    dvb_rows += ls.rows;
    dvb_dis += (int)ls.disagree_margins.size();
    for (float m : ls.disagree_margins) {
      dvb_max_margin = dvb_any ? std::max(dvb_max_margin, m) : m;
      dvb_any = true;
    }
  }
  json dvb;
  dvb["max_abs_logit_diff"] = f32(dvb_max_abs);
  dvb["max_pair_diff_top10"] = f32(dvb_max_pair);
  dvb["argmax_disagreements"] = dvb_dis;
  dvb["max_ref_margin_at_argmax_disagreement"] = nullable_f32(dvb_any, dvb_max_margin);
  dvb["rows"] = dvb_rows;
  dvb["what"] =
      "reference decode path (one token per llama_decode, the greedy steps) vs the batched "
      "teacher-forced rows";
  dvb["per_sequence"] = dvb_seq;

  // --- tolerances: 2x the largest spread, rounded up to 2 significant digits ---
  const double T_tol = ceil2(2.0 * std::max(all_max_abs, dvb_max_abs));
  const double M_tol = ceil2(2.0 * std::max(all_max_pair, dvb_max_pair));
  const double G_tol = ceil2(2.0 * all_max_gap);
  json lt = json::array(), ltt = json::array();
  for (size_t li = 0; li < L; li++) {
    lt.push_back(std::max(1e-4, ceil2(2.0 * all_lout[li])));
    ltt.push_back(std::max(1e-4, ceil2(2.0 * all_lout_tok[li])));
  }
  auto fmt = [](double x) { return py_float(x); };

  // --- teacher_forced ---
  {
    json tfj;
    tfj["prompt"] = "medium";
    tfj["tokens"] = ids_json(tfd.tokens);
    tfj["logits_file"] = name + ".tf_logits.f32";
    tfj["dtype"] = "float32 little-endian";
    tfj["shape"] = json::array({tfd.T, V});
    tfj["row_meaning"] =
        "row i = raw logits after feeding tokens[0..i] (all positions of one batch, every row's "
        "logits requested)";
    write_vec(out_dir + "/" + name + ".tf_logits.f32", tfd.logits);
    tfj["sha256"] = sha256_hex(tfd.logits.data(), tfd.logits.size() * sizeof(float));
    json am = json::array(), mg = json::array();
    int above = 0;
    for (int t = 0; t < tfd.T; t++) {
      am.push_back(argmax_lowest(tfd.row(t), V));
      const float m = margin_of(tfd.row(t), V);
      mg.push_back(f32(m));
      above += m > M_tol;
    }
    tfj["argmax"] = am;
    tfj["margin"] = mg;
    tfj["positions_with_margin_above_tolerance"] = above;
    double min_gap = std::numeric_limits<double>::infinity();
    json ties = json::array();
    for (int t = 0; t < tfd.T; t++) {
      for (size_t mi = 0; mi < tfd.moe_layers.size(); mi++) {
        const double g = tfd.gap((int)mi, t);
        min_gap = std::min(min_gap, g);
        if (g <= G_tol) {
          ties.push_back(json::array({t, tfd.moe_layers[mi], f32((float)g), tfd.sorted_ids((int)mi, t)}));
        }
      }
    }
    tfj["min_routing_gap"] = f32((float)min_gap);
    tfj["routing_near_ties"] = ties;
    tfj["routing_near_ties_format"] = "[token index, layer, reference gap, reference sorted expert ids]";
    tfj["moe_layers"] = tfd.moe_layers;
    json ec = json::array();
    for (size_t mi = 0; mi < tfd.moe_layers.size(); mi++) {
      json rows = json::array();
      for (int t = 0; t < tfd.T; t++) {
        rows.push_back(tfd.sorted_ids((int)mi, t));
      }
      ec.push_back(rows);
    }
    tfj["expert_choices"] = ec;
    tfj["expert_choices_meaning"] =
        "[moe_layer][token][k]: reference expert ids (sorted) for every token of tokens";
    tfj["selection_tensors"] = tfd.score_names;
    doc["teacher_forced"] = tfj;
  }

  // --- layers ---
  {
    json lj;
    lj["prompt"] = "short";
    lj["tokens"] = ids_json(lay.tokens);
    lj["l_out_file"] = name + ".l_out.f32";
    lj["l_out_dtype"] = "float32 little-endian";
    lj["l_out_shape"] = json::array({(int)lay.l_layers.size(), lay.T, lay.E});
    lj["l_out_meaning"] =
        "[layer][token][hidden]: residual stream after layer N (llama.cpp graph tensor "
        "l_out-N), all tokens of the prompt batch";
    lj["l_out_layers"] = lay.l_layers;
    write_vec(out_dir + "/" + name + ".l_out.f32", lay.l_out);
    lj["l_out_sha256"] = sha256_hex(lay.l_out.data(), lay.l_out.size() * sizeof(float));
    std::vector<float> topk_f;
    json ec = json::array(), gaps = json::array(), ties = json::array();
    for (size_t mi = 0; mi < lay.moe_layers.size(); mi++) {
      json rows = json::array(), g = json::array();
      for (int t = 0; t < lay.T; t++) {
        const auto ids = lay.sorted_ids((int)mi, t);
        for (int id : ids) {
          topk_f.push_back((float)id);
        }
        rows.push_back(ids);
        const double gp = lay.gap((int)mi, t);
        g.push_back(f32((float)gp));
        if (gp <= G_tol) {
          ties.push_back(json::array({t, lay.moe_layers[mi], f32((float)gp)}));
        }
      }
      ec.push_back(rows);
      gaps.push_back(g);
    }
    lj["expert_choices_file"] = name + ".topk.f32";
    lj["expert_choices_dtype"] = "float32 little-endian (integer-valued expert ids)";
    lj["expert_choices_shape"] = json::array({(int)lay.moe_layers.size(), lay.T, lay.K});
    lj["expert_choices_meaning"] =
        "[moe_layer][token][k]: ids chosen by llama.cpp (ffn_moe_topk-N), sorted "
        "ascending per token; moe_layers gives N for each first index";
    lj["moe_layers"] = lay.moe_layers;
    write_vec(out_dir + "/" + name + ".topk.f32", topk_f);
    lj["expert_choices_sha256"] = sha256_hex(topk_f.data(), topk_f.size() * sizeof(float));
    lj["expert_choices"] = ec;
    lj["routing_gap"] = gaps;
    lj["routing_gap_meaning"] =
        "[moe_layer][token]: reference selection score of the k-th chosen expert minus the "
        "best unchosen one";
    lj["routing_near_ties"] = ties;
    doc["layers"] = lj;
  }

  // --- spread ---
  json spread;
  spread["method"] =
      "llama.cpp against itself on identical token sequences: each prompt + its first 31 greedy "
      "tokens, teacher-forced in one batch, reference path vs each other CPU path; rows after the "
      "first token whose expert choice flipped (a routing near-tie) are left out of the logit / "
      "l_out statistics and the flips are listed";
  spread["reference_system_info"] = ref.at("system_info");
  spread["repack_vs_no_repack"] = repack_j;
  json allp;
  allp["max_abs_logit_diff"] = f32(all_max_abs);
  allp["max_pair_diff_top10"] = f32(all_max_pair);
  allp["max_boundary_gap_change"] = f32(all_max_gap);
  allp["l_out_rel_l2"] = float_list(all_lout);
  allp["l_out_max_token_rel_l2"] = float_list(all_lout_tok);
  spread["all_paths"] = allp;
  spread["paths"] = paths_j;
  spread["decode_vs_batched"] = dvb;
  doc["spread"] = spread;

  // --- tolerance ---
  float min_ref_margin = std::numeric_limits<float>::infinity();
  for (const char* s : kSeqs) {
    for (float m : ref_step_margin[s]) {
      min_ref_margin = std::min(min_ref_margin, m);
    }
  }
  // greedy ids are required exactly only where llama.cpp's own paths all agree on every step and every
  // reference step is clear of the argmax tolerance (lfm2moe-tiny-f16 in the shipped set)
  const bool exact = diff_ids_paths.empty() && min_ref_margin > M_tol;

  json tol;
  tol["logit_abs"] = T_tol;
  tol["argmax_margin"] = M_tol;
  tol["routing_gap"] = G_tol;
  tol["l_out_rel_l2"] = lt;
  tol["l_out_token_rel_l2"] = ltt;
  tol["derivation"] =
      "2 x the largest spread measured between llama.cpp's own CPU paths (spread.all_paths: repack vs "
      "no-repack, "
      "AVX2, SSE4.2 and scalar kernels, decode vs batched), rounded up to 2 significant digits: logit_abs = "
      "2 x max "
      "|logit diff|; argmax_margin = 2 x max change of (logit_j - logit_top) over the reference's 10 best "
      "tokens; "
      "routing_gap = 2 x max change of the reference's boundary gap (score of the k-th chosen expert minus "
      "the best "
      "unchosen one); l_out = 2 x the per-layer relative L2 spread (floor 1e-4)";
  tol["repack_only"] = {{"logit_abs", ceil2(2.0 * repack_max_abs)},
                        {"argmax_margin", ceil2(2.0 * repack_max_pair)}};
  if (exact) {
    tol["greedy_ids_exact"] = true;
    json ev;
    ev["paths_with_identical_greedy_ids"] = same_ids_paths;
    ev["paths_with_different_greedy_ids"] = json::array();
    ev["steps_per_path"] = 3 * kNPredict;
    ev["min_reference_margin"] = f32(min_ref_margin);
    ev["argmax_margin"] = M_tol;
    tol["greedy_ids_exact_evidence"] = ev;
  }
  std::set<std::string> sel(tfd.score_names.begin(), tfd.score_names.end());
  std::string sel_s;
  for (const auto& s : sel) {
    sel_s += (sel_s.empty() ? "" : ", ") + s.substr(0, s.rfind('-')) + "-N";
  }
  json rule;
  rule["routing"] =
      "routing gap of a (token, MoE layer) = selection score of the k-th chosen expert minus the best "
      "unchosen one in the reference (lfm2moe: sigmoid(z)+exp_probs_b, qwen3moe: softmax(z), gpt-oss: "
      "z+bias; this model: the values of llama.cpp's graph tensor " +
      sel_s +
      ", the input of ffn_moe_argsort-N). The engine's set of chosen experts must equal the "
      "reference's wherever that gap > " +
      fmt(G_tol) + "; where it is <= " + fmt(G_tol) +
      " (a routing near-tie, listed in routing_near_ties) either set is accepted, but if the engine "
      "picked a different set there, its positions from that token on are exempt from the logit checks";
  rule["teacher_forced_logits"] =
      "feed teacher_forced.tokens as one sequence; for every position i (before any "
      "exempting near-tie flip): max over the vocabulary |logit[i][v] - ref[i][v]| <= " +
      fmt(T_tol) +
      ", and argmax(logit[i]) == argmax(ref[i]) wherever the reference "
      "margin (top1 - top2) > " +
      fmt(M_tol);
  if (exact) {
    rule["greedy_ids"] =
        "generate n_predict tokens greedily from prompt_ids: the produced ids must equal "
        "generated_ids at every one of the n_predict steps of every generation case (no "
        "divergence is allowed; fewer ids fail). Exact because every other llama.cpp CPU path "
        "produced exactly these ids and every reference step's margin is >= " +
        py_float((double)min_ref_margin) + " > " + fmt(M_tol);
    rule["greedy_top5"] = "at every step, the engine's logits of the reference top-5 ids are within " +
                          fmt(T_tol) + " of the reference values";
  } else {
    rule["greedy_ids"] =
        "generate n_predict tokens greedily from prompt_ids; walk the steps in order: a produced id "
        "may differ from generated_ids only at a step whose reference margin <= " +
        fmt(M_tol) +
        "; the comparison stops at the first such (allowed) divergence; any other difference, or "
        "fewer ids, fails";
    rule["greedy_top5"] =
        "while the produced ids equal the reference, the engine's logits of the reference top-5 "
        "ids at each step are within " +
        fmt(T_tol) + " of the reference values";
  }
  rule["l_out"] =
      "for layers.tokens (one batch), per layer N: ||l_out_N - ref_N||_2 / ||ref_N||_2 over all tokens <= "
      "tolerance.l_out_rel_l2[N], and for every token the same ratio over that token's row <= "
      "tolerance.l_out_token_rel_l2[N]; the first failing layer is where the divergence starts";
  tol["rule"] = rule;
  doc["tolerance"] = tol;

  write_json(out_dir + "/" + name + ".json", doc);
  if (!keep_work) {
    fs::remove_all(work);
  }
  fprintf(stderr, "golden_maker: wrote %s/%s.{json,tf_logits.f32,l_out.f32,topk.f32} (reference on %s)\n",
          out_dir.c_str(), name.c_str(), variant.c_str());
  return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// command line
// ---------------------------------------------------------------------------------------------------------------

const char* kUsage =
    "usage:\n"
    "  golden_maker make GGUF NAME OUTDIR [--texts texts.json] [--regenerate CMD] [--numerics JSON]\n"
    "                    [--cpu zen4|auto|<variant>] [--work DIR] [--keep-work] [--reuse] [--verbose]\n"
    "  golden_maker text --model GGUF --texts texts.json --out FILE.json\n"
    "  golden_maker run  --model GGUF --jobs JOBS.json --out DIR [--backend "
    "auto|haswell|sse42|x64|<variant>]\n"
    "                    [--no-repack] [--threads N]\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      fputs(kUsage, stderr);
      return 2;
    }
    const std::string cmd = argv[1];
    std::vector<std::string> pos;
    std::map<std::string, std::string> opt;
    std::set<std::string> flags;
    const std::set<std::string> flag_names = {"--no-repack", "--keep-work", "--reuse", "--verbose"};
    for (int i = 2; i < argc; i++) {
      const std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        if (flag_names.count(a)) {
          flags.insert(a);
        } else if (i + 1 < argc) {
          opt[a] = argv[++i];
        } else {
          fail("option %s needs a value\n%s", a.c_str(), kUsage);
        }
      } else {
        pos.push_back(a);
      }
    }
    auto need = [&](const char* k) {
      auto it = opt.find(k);
      if (it == opt.end()) {
        fail("%s needs %s\n%s", cmd.c_str(), k, kUsage);
      }
      return it->second;
    };
    if (flags.count("--verbose")) {
      g_log_level = GGML_LOG_LEVEL_DEBUG;
    }
    llama_log_set(log_cb, nullptr);

    // texts.json lives beside the binary's source directory unless given
    const std::string default_texts =
        (fs::path(self_exe()).parent_path().parent_path() / "texts.json").string();

    if (cmd == "make") {
      if (pos.size() != 3) {
        fail("make needs GGUF NAME OUTDIR\n%s", kUsage);
      }
      const std::string texts = opt.count("--texts") ? opt["--texts"] : default_texts;
      return cmd_make(pos[0], pos[1], pos[2], fs::absolute(texts).string(), opt["--regenerate"],
                      opt["--numerics"], opt["--work"], flags.count("--keep-work") > 0,
                      flags.count("--reuse") > 0, opt.count("--cpu") ? opt["--cpu"] : "zen4");
    }
    if (cmd == "text") {
      return cmd_text(need("--model"), need("--texts"), need("--out"));
    }
    if (cmd == "run") {
      const int threads = opt.count("--threads") ? atoi(opt["--threads"].c_str()) : 1;
      if (threads < 1) {
        fail("--threads must be >= 1");
      }
      return cmd_run(need("--model"), need("--jobs"), need("--out"),
                     opt.count("--backend") ? opt["--backend"] : "auto", flags.count("--no-repack") > 0,
                     threads);
    }
    fail("unknown command '%s'\n%s", cmd.c_str(), kUsage);
  } catch (const std::exception& e) {
    fprintf(stderr, "golden_maker: error: %s\n", e.what());
    return 1;
  }
}
