// `diskformer inspect FILE.gguf`: what a GGUF holds and how much of it diskformer keeps resident. One report
// is built as JSON (so --json and the human table can never disagree) and printed in either form. Works on
// any architecture: everything is read generically from the metadata and the tensor table; routed experts are
// the tensors named blk.N.ffn_*_exps.weight, the ones the store streams (shared experts, *_shexp, and
// per-expert biases are resident).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "gguf/tensor_names.h"
#include "util/error.h"

namespace df::cli {

namespace {

using json = nlohmann::ordered_json;
using gguf::Value;
using gguf::ValueType;

constexpr size_t kMaxInlineArray = 64;  // longer arrays are summarised as {array, length}

bool is_vocab_array(const std::string& key) {
  return key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type" ||
         key == "tokenizer.ggml.merges" || key == "tokenizer.ggml.scores";
}

// Keys that tokenizer_report() already shows in its own words.
bool is_summarised_tokenizer_key(const std::string& key) {
  return key == "tokenizer.ggml.model" || key == "tokenizer.ggml.pre" ||
         key == "tokenizer.ggml.add_bos_token" || key == "tokenizer.ggml.add_eos_token" ||
         (key.rfind("tokenizer.ggml.", 0) == 0 && key.ends_with("_token_id"));
}

json value_to_json(const Value& v) {
  switch (v.type) {
    case ValueType::UINT8:
    case ValueType::UINT16:
    case ValueType::UINT32:
    case ValueType::UINT64:
      return v.u;
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64:
      return v.i;
    // A float32 key is shown with the shortest digits that give the same float (1e-05, not 9.99999974e-06).
    case ValueType::FLOAT32:
      return std::stod(fmt::format("{}", static_cast<float>(v.f)));
    case ValueType::FLOAT64:
      return v.f;
    case ValueType::BOOL:
      return v.u != 0;
    case ValueType::STRING:
      return v.s;
    case ValueType::ARRAY: {
      if (v.arr.size() > kMaxInlineArray)
        return json{{"array", std::string(gguf::value_type_name(v.elem))}, {"length", v.arr.size()}};
      json a = json::array();
      for (const auto& e : v.arr) a.push_back(value_to_json(e));
      return a;
    }
  }
  return nullptr;
}

// blk.<N>.<name>: N, or -1 for global tensors.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t end = name.find('.', 4);
  if (end == std::string::npos) return -1;
  try {
    return std::stoi(name.substr(4, end - 4));
  } catch (...) {
    return -1;
  }
}

bool is_routed_expert(const std::string& name) { return gguf::is_routed_expert_weight(name); }

json tokenizer_report(const gguf::File& f) {
  json t = json::object();
  const auto str = [&](const char* k) { return f.get_string(k); };
  if (auto m = str("tokenizer.ggml.model")) t["model"] = *m;
  if (auto p = str("tokenizer.ggml.pre")) t["pre"] = *p;
  const Value* tokens = f.find("tokenizer.ggml.tokens");
  const Value* types = f.find("tokenizer.ggml.token_type");
  const Value* merges = f.find("tokenizer.ggml.merges");
  t["n_tokens"] = tokens && tokens->is_array() ? tokens->arr.size() : 0;
  t["n_merges"] = merges && merges->is_array() ? merges->arr.size() : 0;
  const auto token_text = [&](int64_t id) -> json {
    if (tokens && tokens->is_array() && id >= 0 && size_t(id) < tokens->arr.size() &&
        tokens->arr[size_t(id)].type == ValueType::STRING)
      return tokens->arr[size_t(id)].s;
    return nullptr;
  };
  for (const char* which : {"bos", "eos", "eot", "eom", "padding", "unknown"}) {
    if (auto id = f.get_int(fmt::format("tokenizer.ggml.{}_token_id", which)))
      t[which] = json{{"id", *id}, {"text", token_text(*id)}};
  }
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) t["add_bos"] = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) t["add_eos"] = *b;
  if (types && types->is_array()) {
    static const char* kNames[] = {"undefined",    "normal", "unknown", "control",
                                   "user_defined", "unused", "byte"};
    std::map<int64_t, size_t> counts;
    json specials = json::array();
    size_t n_specials = 0;
    for (size_t id = 0; id < types->arr.size(); ++id) {
      const int64_t ty = types->arr[id].is_int() ? types->arr[id].as_int() : -1;
      ++counts[ty];
      if (ty == 3 || ty == 4) {
        if (++n_specials <= kMaxInlineArray)
          specials.push_back(json{{"id", id}, {"text", token_text(int64_t(id))}, {"type", kNames[ty]}});
      }
    }
    json c = json::object();
    for (auto [ty, n] : counts) c[ty >= 0 && ty <= 6 ? kNames[ty] : fmt::format("type_{}", ty)] = n;
    t["token_types"] = c;
    t["n_special"] = n_specials;
    t["special_tokens"] = specials;  // the first kMaxInlineArray control / user-defined tokens
  }
  if (auto tpl = str("tokenizer.chat_template")) t["chat_template_chars"] = tpl->size();
  return t;
}

json memory_report(const gguf::File& f, const std::string& arch) {
  uint64_t expert_bytes = 0, other_bytes = 0;
  std::set<int> moe_layers;
  int64_t n_expert_from_shape = 0;
  for (const auto& t : f.tensors()) {
    if (is_routed_expert(t.name)) {
      expert_bytes += t.nbytes;
      moe_layers.insert(layer_of(t.name));
      if (t.name.ends_with("_exps.weight")) n_expert_from_shape = t.ne[std::max<uint32_t>(t.n_dims, 1) - 1];
    } else {
      other_bytes += t.nbytes;
    }
  }
  json m;
  const uint64_t total = expert_bytes + other_bytes;
  m["routed_expert_bytes"] = expert_bytes;
  m["other_bytes"] = other_bytes;
  m["routed_expert_fraction"] = total ? double(expert_bytes) / double(total) : 0.0;
  m["n_moe_layers"] = moe_layers.size();
  const auto key_int = [&](const char* k) { return arch.empty() ? std::nullopt : f.get_int(arch + "." + k); };
  const int64_t n_expert = key_int("expert_count").value_or(n_expert_from_shape);
  const auto n_used = key_int("expert_used_count");
  if (n_expert > 0) m["n_expert"] = n_expert;
  if (n_used) m["n_expert_used"] = *n_used;
  uint64_t active = 0;
  if (!moe_layers.empty() && n_expert > 0) {
    const uint64_t per_expert = expert_bytes / (moe_layers.size() * uint64_t(n_expert));
    m["bytes_per_expert"] = per_expert;
    if (n_used) {
      active = moe_layers.size() * uint64_t(*n_used) * per_expert;
      m["active_expert_bytes_per_token"] = active;
    }
  }
  // Resident: the dense trunk plus an expert cache that holds one token's experts (the least that avoids
  // re-reading an expert within a token); KV cache and activations come on top.
  m["resident_estimate_bytes"] = other_bytes + active;
  return m;
}

json build_report(const gguf::File& f) {
  json r;
  r["file"] = f.path();
  r["file_bytes"] = f.file_size();
  r["gguf_version"] = f.version();
  r["alignment"] = f.alignment();
  r["data_offset"] = f.data_offset();
  const std::string arch = f.architecture();
  r["architecture"] = arch;
  r["name"] = f.get_string("general.name").value_or("");

  json general = json::object(), hyper = json::object(), tok_keys = json::object(), other = json::object();
  for (const auto& [key, value] : f.metadata()) {
    if (is_vocab_array(key) || key == "tokenizer.chat_template") continue;  // summarised under "tokenizer"
    json v = value_to_json(value);
    if (key.rfind("general.", 0) == 0)
      general[key.substr(8)] = v;
    else if (!arch.empty() && key.rfind(arch + ".", 0) == 0)
      hyper[key.substr(arch.size() + 1)] = v;
    else if (key.rfind("tokenizer.", 0) == 0) {
      if (!is_summarised_tokenizer_key(key)) tok_keys[key] = v;
    } else
      other[key] = v;
  }
  r["general"] = general;
  r["hyperparameters"] = hyper;
  if (!other.empty()) r["other_metadata"] = other;
  json tok = tokenizer_report(f);
  if (!tok_keys.empty()) tok["keys"] = tok_keys;
  r["tokenizer"] = tok;

  json tensors = json::array();
  std::map<std::string, uint64_t> by_type;
  uint64_t tensor_bytes = 0, n_params = 0;
  for (const auto& t : f.tensors()) {
    json shape = json::array();
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back(json{{"name", t.name},
                           {"type", std::string(ggml_type_name(t.type))},
                           {"shape", shape},
                           {"bytes", t.nbytes},
                           {"offset", t.offset},
                           {"routed_expert", is_routed_expert(t.name)}});
    by_type[std::string(ggml_type_name(t.type))] += t.nbytes;
    tensor_bytes += t.nbytes;
    n_params += uint64_t(t.n_elements());
  }
  r["totals"] =
      json{{"n_tensors", f.tensors().size()}, {"tensor_bytes", tensor_bytes}, {"n_params", n_params}};
  json bt = json::object();
  for (const auto& [name, bytes] : by_type) bt[name] = bytes;
  r["bytes_by_type"] = bt;
  r["memory"] = memory_report(f, arch);
  r["tensors"] = tensors;
  return r;
}

// ---- human output ----

std::string grouped(uint64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string human_bytes(uint64_t b) {
  const double d = double(b);
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", d / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.2f} MiB", d / double(uint64_t{1} << 20));
  if (b >= (uint64_t{1} << 10)) return fmt::format("{:.1f} KiB", d / 1024.0);
  return fmt::format("{} B", b);
}

std::string short_value(const json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  for (auto& ch : s)
    if (ch == '\n') ch = ' ';
  if (s.size() > 100) s = s.substr(0, 97) + "...";
  return s;
}

void print_keys(const char* title, const json& obj, const std::string& prefix) {
  if (obj.empty()) return;
  fmt::print("\n{}\n", title);
  size_t width = 0;
  for (const auto& [k, v] : obj.items()) width = std::max(width, prefix.size() + k.size());
  for (const auto& [k, v] : obj.items()) fmt::print("  {:<{}}  {}\n", prefix + k, width, short_value(v));
}

std::string token_ref(const json& t) {
  if (t.is_null()) return "-";
  return fmt::format("{} {}", t["id"].get<int64_t>(),
                     t["text"].is_string() ? "'" + t["text"].get<std::string>() + "'" : "?");
}

void print_human(const json& r) {
  fmt::print("{}: GGUF v{}, {} bytes ({}), alignment {}, data at offset {}\n", r["file"].get<std::string>(),
             r["gguf_version"].get<uint32_t>(), grouped(r["file_bytes"]), human_bytes(r["file_bytes"]),
             r["alignment"].get<uint32_t>(), grouped(r["data_offset"]));
  const std::string arch = r["architecture"];
  fmt::print("architecture {}, name '{}'\n", arch.empty() ? "(none)" : arch, r["name"].get<std::string>());
  print_keys("general", r["general"], "general.");
  print_keys(arch.empty() ? "hyper-parameters" : fmt::format("hyper-parameters ({}.*)", arch).c_str(),
             r["hyperparameters"], "");
  if (r.contains("other_metadata")) print_keys("other metadata", r["other_metadata"], "");

  const json& t = r["tokenizer"];
  fmt::print("\ntokenizer\n");
  fmt::print("  model {}, pre {}, {} tokens, {} merges\n", t.value("model", "-"), t.value("pre", "-"),
             grouped(t["n_tokens"]), grouped(t["n_merges"]));
  if (t.contains("token_types")) {
    std::string s;
    for (const auto& [k, v] : t["token_types"].items())
      s += fmt::format("{}{} {}", s.empty() ? "" : ", ", grouped(v), k);
    fmt::print("  token types: {}\n", s);
  }
  std::string ids;
  for (const char* which : {"bos", "eos", "eot", "eom", "padding", "unknown"})
    if (t.contains(which)) ids += fmt::format("{}{} {}", ids.empty() ? "" : ", ", which, token_ref(t[which]));
  if (t.contains("add_bos")) ids += fmt::format(", add_bos {}", t["add_bos"].get<bool>());
  if (t.contains("add_eos")) ids += fmt::format(", add_eos {}", t["add_eos"].get<bool>());
  if (!ids.empty()) fmt::print("  {}\n", ids);
  if (t.contains("special_tokens") && !t["special_tokens"].empty()) {
    std::string s;
    for (const auto& sp : t["special_tokens"])
      s += fmt::format("{}{} {}", s.empty() ? "" : ", ", sp["id"].get<int64_t>(),
                       sp["text"].is_string() ? sp["text"].get<std::string>() : "?");
    if (t["n_special"].get<size_t>() > t["special_tokens"].size())
      s += fmt::format(", ... ({} in all)", t["n_special"].get<size_t>());
    fmt::print("  special: {}\n", s);
  }
  if (t.contains("chat_template_chars"))
    fmt::print("  chat template: {} characters\n", grouped(t["chat_template_chars"]));
  if (t.contains("keys")) {
    for (const auto& [k, v] : t["keys"].items()) fmt::print("  {}  {}\n", k, short_value(v));
  }

  const json& tensors = r["tensors"];
  size_t wname = 4, wshape = 5;
  const auto shape_str = [](const json& shape) {
    std::string s = "{";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<int64_t>());
    return s + "}";
  };
  for (const auto& x : tensors) {
    wname = std::max(wname, x["name"].get<std::string>().size());
    wshape = std::max(wshape, shape_str(x["shape"]).size());
  }
  fmt::print("\ntensors ({})\n", tensors.size());
  fmt::print("  {:<{}}  {:<6}  {:<{}}  {:>15}\n", "name", wname, "type", "shape", wshape, "bytes");
  for (const auto& x : tensors)
    fmt::print("  {:<{}}  {:<6}  {:<{}}  {:>15}{}\n", x["name"].get<std::string>(), wname,
               x["type"].get<std::string>(), shape_str(x["shape"]), wshape, grouped(x["bytes"]),
               x["routed_expert"].get<bool>() ? "  expert" : "");
  std::string bt;
  for (const auto& [k, v] : r["bytes_by_type"].items())
    bt += fmt::format("{}{} {}", bt.empty() ? "" : ", ", k, human_bytes(v));
  fmt::print("  by type: {}; {} parameters\n", bt, grouped(r["totals"]["n_params"]));

  const json& m = r["memory"];
  const uint64_t ex = m["routed_expert_bytes"], other = m["other_bytes"];
  fmt::print("\nmemory\n");
  fmt::print("  routed experts     {:>15} bytes  {:>10}  {:5.1f}%  (streamed from disk)\n", grouped(ex),
             human_bytes(ex), 100.0 * m["routed_expert_fraction"].get<double>());
  fmt::print("  everything else    {:>15} bytes  {:>10}  {:5.1f}%  (resident)\n", grouped(other),
             human_bytes(other), 100.0 * (1.0 - m["routed_expert_fraction"].get<double>()));
  if (m.contains("bytes_per_expert"))
    fmt::print("  {} MoE layers x {} experts, {} per expert\n", m["n_moe_layers"].get<size_t>(),
               m["n_expert"].get<int64_t>(), human_bytes(m["bytes_per_expert"]));
  if (m.contains("active_expert_bytes_per_token"))
    fmt::print("  experts used per token (top-{}): {}\n", m["n_expert_used"].get<int64_t>(),
               human_bytes(m["active_expert_bytes_per_token"]));
  fmt::print("  estimated resident memory: {} (trunk + one token's experts; KV cache extra)\n",
             human_bytes(m["resident_estimate_bytes"]));
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Args {
    std::string path;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Show a GGUF's architecture, hyper-parameters, tokenizer, tensors and the bytes of routed experts "
      "versus everything else (what stays resident)");
  sub->add_option("file", args->path, "GGUF file")->required();
  sub->add_flag("--json", args->json, "print one JSON document instead of tables");
  sub->callback([args] {
    const gguf::File f = gguf::File::open(args->path);
    const json report = build_report(f);
    if (args->json)
      fmt::print("{}\n", report.dump(2));
    else
      print_human(report);
  });
}

}  // namespace df::cli
