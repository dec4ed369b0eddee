#pragma once
// A plain float32 forward pass of lfm2moe and qwen3moe (ARCHITECTURES.md 2.3, 3.3), for tests only: weights
// are dequantized once, activations stay in f32 (no Q8 activation quantization, f32 KV), every token of a
// sequence is processed in one pass. It is a second opinion on the synthetic models' numerics that does not
// depend on the engine, and it is checked against llama.cpp's logits on the golden F16 model.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::test {

struct RefOutput {
  std::vector<std::vector<float>> logits;              // [token][vocab]
  std::vector<std::vector<std::vector<float>>> l_out;  // [layer][token][hidden]
  std::vector<std::vector<std::vector<int>>> experts;  // [moe layer][token][k], sorted
  std::vector<std::vector<float>> routing_gap;         // [moe layer][token]: k-th minus (k+1)-th score
};

class RefModel {
 public:
  explicit RefModel(const std::string& path) : f_(gguf::File::open(path)) {
    arch_ = f_.architecture();
    if (arch_ != "lfm2moe" && arch_ != "qwen3moe") fail("RefModel: unsupported architecture '{}'", arch_);
    const auto key = [&](const char* k) { return arch_ + "." + k; };
    n_layer_ = int(f_.require_int(key("block_count")));
    H_ = int(f_.require_int(key("embedding_length")));
    n_head_ = int(f_.require_int(key("attention.head_count")));
    n_expert_ = int(f_.require_int(key("expert_count")));
    k_ = int(f_.require_int(key("expert_used_count")));
    F_ = int(f_.require_int(key("expert_feed_forward_length")));
    eps_ = float(f_.require_float(key("attention.layer_norm_rms_epsilon")));
    theta_ = float(f_.require_float(key("rope.freq_base")));
    const gguf::Value& kv = f_.require(key("attention.head_count_kv"));
    for (int il = 0; il < n_layer_; ++il)
      n_head_kv_.push_back(int(kv.is_array() ? kv.arr[size_t(il)].as_int() : kv.as_int()));
    head_dim_ = arch_ == "qwen3moe" ? int(f_.require_int(key("attention.key_length"))) : H_ / n_head_;
    n_dense_lead_ = arch_ == "lfm2moe" ? int(f_.require_int(key("leading_dense_block_count"))) : 0;
    n_vocab_ = int(f_.require_tensor("token_embd.weight").ne[1]);
  }

  int n_layer() const { return n_layer_; }
  int hidden() const { return H_; }
  int n_vocab() const { return n_vocab_; }
  bool is_moe(int il) const { return il >= n_dense_lead_; }

  RefOutput forward(const std::vector<int>& tokens) {
    const size_t T = tokens.size();
    RefOutput out;
    std::vector<std::vector<float>> x(T);
    const auto& embd = weight("token_embd.weight");
    for (size_t t = 0; t < T; ++t)
      x[t].assign(embd.begin() + long(tokens[t]) * H_, embd.begin() + long(tokens[t] + 1) * H_);
    for (int il = 0; il < n_layer_; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      std::vector<std::vector<float>> a(T);
      for (size_t t = 0; t < T; ++t) a[t] = rms_norm(x[t], weight(p + "attn_norm.weight"));
      std::vector<std::vector<float>> mix =
          n_head_kv_[size_t(il)] > 0 ? attention(p, a, il) : short_conv(p, a);
      for (size_t t = 0; t < T; ++t)
        for (int i = 0; i < H_; ++i) x[t][size_t(i)] += mix[t][size_t(i)];
      std::vector<std::vector<int>> chosen(T);
      std::vector<float> gaps(T);
      for (size_t t = 0; t < T; ++t) {
        const std::vector<float> f = rms_norm(x[t], weight(p + "ffn_norm.weight"));
        const std::vector<float> y =
            is_moe(il) ? moe(p, f, chosen[t], gaps[t])
                       : swiglu(p + "ffn_gate.weight", p + "ffn_up.weight", p + "ffn_down.weight", f, 0, 0);
        for (int i = 0; i < H_; ++i) x[t][size_t(i)] += y[size_t(i)];
      }
      if (is_moe(il)) {
        out.experts.push_back(chosen);
        out.routing_gap.push_back(gaps);
      }
      out.l_out.push_back(x);
    }
    const bool tied = f_.find_tensor("output.weight") == nullptr;
    const auto& head = weight(tied ? "token_embd.weight" : "output.weight");
    const auto& norm = weight(arch_ == "lfm2moe" ? "token_embd_norm.weight" : "output_norm.weight");
    for (size_t t = 0; t < T; ++t) out.logits.push_back(matvec(head, rms_norm(x[t], norm), H_, n_vocab_));
    return out;
  }

  // Dequantized weights, loaded on first use.
  const std::vector<float>& weight(const std::string& name) {
    auto it = w_.find(name);
    if (it != w_.end()) return it->second;
    const gguf::TensorInfo& t = f_.require_tensor(name);
    std::vector<uint8_t> raw(t.nbytes);
    f_.read_tensor(t, raw.data());
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    quant::dequantize_row(t.type, raw.data(), v.data(), t.n_elements());
    return w_.emplace(name, std::move(v)).first->second;
  }

 private:
  std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, size_t off = 0,
                              size_t n = 0) const {
    if (n == 0) n = x.size();
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += double(x[off + i]) * x[off + i];
    const float scale = 1.0f / std::sqrt(float(ss / double(n)) + eps_);
    std::vector<float> y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * scale * w[i];
    return y;
  }

  // W {K, N}: N rows of K.
  static std::vector<float> matvec(const std::vector<float>& W, const std::vector<float>& x, int K, int N,
                                   size_t offset = 0) {
    std::vector<float> y(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) {
      const float* row = W.data() + offset + size_t(n) * size_t(K);
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(row[k]) * x[size_t(k)];
      y[size_t(n)] = float(s);
    }
    return y;
  }

  void rope(std::vector<float>& v, int n_heads, int pos) const {
    const int d = head_dim_;
    const float theta_scale = std::pow(theta_, -2.0f / float(d));
    for (int h = 0; h < n_heads; ++h) {
      float theta = float(pos);
      float* x = v.data() + size_t(h) * size_t(d);
      for (int i = 0; i < d / 2; ++i) {
        const float c = std::cos(theta), s = std::sin(theta);
        const float a = x[i], b = x[i + d / 2];
        x[i] = a * c - b * s;
        x[i + d / 2] = a * s + b * c;
        theta *= theta_scale;
      }
    }
  }

  std::vector<std::vector<float>> attention(const std::string& p, const std::vector<std::vector<float>>& a,
                                            int il) {
    const size_t T = a.size();
    const int hd = head_dim_, nkv = n_head_kv_[size_t(il)];
    std::vector<std::vector<float>> q(T), k(T), v(T), out(T);
    for (size_t t = 0; t < T; ++t) {
      q[t] = matvec(weight(p + "attn_q.weight"), a[t], H_, n_head_ * hd);
      k[t] = matvec(weight(p + "attn_k.weight"), a[t], H_, nkv * hd);
      v[t] = matvec(weight(p + "attn_v.weight"), a[t], H_, nkv * hd);
      for (int h = 0; h < n_head_; ++h) {
        auto n = rms_norm(q[t], weight(p + "attn_q_norm.weight"), size_t(h * hd), size_t(hd));
        std::copy(n.begin(), n.end(), q[t].begin() + h * hd);
      }
      for (int h = 0; h < nkv; ++h) {
        auto n = rms_norm(k[t], weight(p + "attn_k_norm.weight"), size_t(h * hd), size_t(hd));
        std::copy(n.begin(), n.end(), k[t].begin() + h * hd);
      }
      rope(q[t], n_head_, int(t));
      rope(k[t], nkv, int(t));
    }
    const float scale = 1.0f / std::sqrt(float(hd));
    for (size_t t = 0; t < T; ++t) {
      std::vector<float> o(static_cast<size_t>(n_head_ * hd), 0.0f);
      for (int h = 0; h < n_head_; ++h) {
        const int hk = h / (n_head_ / nkv);
        std::vector<double> s(t + 1);
        double mx = -1e30;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(q[t][size_t(h * hd + i)]) * k[j][size_t(hk * hd + i)];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int i = 0; i < hd; ++i) o[size_t(h * hd + i)] += float(s[j] / sum) * v[j][size_t(hk * hd + i)];
      }
      out[t] = matvec(weight(p + "attn_output.weight"), o, n_head_ * hd, H_);
    }
    return out;
  }

  std::vector<std::vector<float>> short_conv(const std::string& p, const std::vector<std::vector<float>>& a) {
    const size_t T = a.size();
    const auto& cw = weight(p + "shortconv.conv.weight");
    const int L = int(f_.require_tensor(p + "shortconv.conv.weight").ne[0]);
    std::vector<std::vector<float>> bcx(T), z(T), out(T);
    for (size_t t = 0; t < T; ++t) {
      bcx[t] = matvec(weight(p + "shortconv.in_proj.weight"), a[t], H_, 3 * H_);
      z[t].resize(size_t(H_));
      for (int i = 0; i < H_; ++i) z[t][size_t(i)] = bcx[t][size_t(i)] * bcx[t][size_t(2 * H_ + i)];
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<float> y(static_cast<size_t>(H_));
      for (int ch = 0; ch < H_; ++ch) {
        float c = 0;
        for (int i = 0; i < L; ++i) {
          const long src = long(t) - (L - 1) + i;  // tap 0 = oldest
          if (src >= 0) c += cw[size_t(ch * L + i)] * z[size_t(src)][size_t(ch)];
        }
        y[size_t(ch)] = bcx[t][size_t(H_ + ch)] * c;
      }
      out[t] = matvec(weight(p + "shortconv.out_proj.weight"), y, H_, H_);
    }
    return out;
  }

  std::vector<float> swiglu(const std::string& gate, const std::string& up, const std::string& down,
                            const std::vector<float>& f, int expert, int ff) {
    const int F = ff ? ff : int(f_.require_tensor(gate).ne[1]);
    const size_t in_off = size_t(expert) * size_t(F) * size_t(H_),
                 out_off = size_t(expert) * size_t(H_) * size_t(F);
    std::vector<float> g = matvec(weight(gate), f, H_, F, in_off), u = matvec(weight(up), f, H_, F, in_off);
    for (int i = 0; i < F; ++i) g[size_t(i)] = g[size_t(i)] / (1.0f + std::exp(-g[size_t(i)])) * u[size_t(i)];
    return matvec(weight(down), g, F, H_, out_off);
  }

  std::vector<float> moe(const std::string& p, const std::vector<float>& f, std::vector<int>& chosen,
                         float& gap) {
    std::vector<float> z = matvec(weight(p + "ffn_gate_inp.weight"), f, H_, n_expert_);
    std::vector<float> prob(z.size());
    std::vector<float> score(z.size());
    if (arch_ == "lfm2moe") {
      const auto& bias = weight(p + "exp_probs_b.bias");
      for (size_t e = 0; e < z.size(); ++e) {
        prob[e] = 1.0f / (1.0f + std::exp(-z[e]));
        score[e] = prob[e] + bias[e];
      }
    } else {
      const float mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (size_t e = 0; e < z.size(); ++e) sum += (prob[e] = std::exp(z[e] - mx));
      for (auto& v : prob) v = float(v / sum);
      score = prob;
    }
    std::vector<int> order(z.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return score[size_t(x)] > score[size_t(y)]; });
    gap = k_ < n_expert_ ? score[size_t(order[size_t(k_ - 1)])] - score[size_t(order[size_t(k_)])] : 1.0f;
    float wsum = 0;
    for (int j = 0; j < k_; ++j) wsum += prob[size_t(order[size_t(j)])];
    wsum = std::max(wsum, 6.103515625e-5f);
    std::vector<float> y(static_cast<size_t>(H_), 0.0f);
    for (int j = 0; j < k_; ++j) {
      const int e = order[size_t(j)];
      const std::vector<float> ye =
          swiglu(p + "ffn_gate_exps.weight", p + "ffn_up_exps.weight", p + "ffn_down_exps.weight", f, e, F_);
      const float w = prob[size_t(e)] / wsum;
      for (int i = 0; i < H_; ++i) y[size_t(i)] += w * ye[size_t(i)];
      chosen.push_back(e);
    }
    std::sort(chosen.begin(), chosen.end());
    return y;
  }

  gguf::File f_;
  std::string arch_;
  int n_layer_ = 0, H_ = 0, n_head_ = 0, head_dim_ = 0, n_expert_ = 0, k_ = 0, F_ = 0, n_dense_lead_ = 0,
      n_vocab_ = 0;
  float eps_ = 0, theta_ = 0;
  std::vector<int> n_head_kv_;
  std::map<std::string, std::vector<float>> w_;
};

}  // namespace df::test
