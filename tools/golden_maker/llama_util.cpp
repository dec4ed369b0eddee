#include "llama_util.h"

#include <fstream>

namespace golden_maker {

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

int argmax_lowest(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++) {
    if (x[i] > x[best]) {  // strict: the lowest id wins an exact tie
      best = i;
    }
  }
  return best;
}

}  // namespace golden_maker
