// ---------------------------------------------------------------------------------------------------------------
// `run`: greedy generations and teacher-forced batches on one CPU path
// ---------------------------------------------------------------------------------------------------------------

#include <cinttypes>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "commands.h"
#include "fixture_json.h"
#include "ggml-backend.h"
#include "llama_util.h"

namespace golden_maker {

namespace {

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

}  // namespace

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

}  // namespace golden_maker
