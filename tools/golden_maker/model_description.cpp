#include "model_description.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>

#include "ggml.h"
#include "gguf.h"

namespace golden_maker {

namespace {

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

}  // namespace

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

}  // namespace golden_maker
