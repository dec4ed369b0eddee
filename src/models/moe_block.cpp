#include "models/moe_block.h"

#include <algorithm>

namespace df::models {

void MoeBuffers::reserve(size_t t, size_t H, size_t E, size_t K) {
  for (auto* buf : {&moe, &guess_xn}) buf->resize(t * H);
  router_logits.resize(t * E);
  guess_logits.resize(t * E);
  expert_ids.resize(t * K);
  expert_weights.resize(t * K);
  guess_ids.resize(t * K);
  guess_weights.resize(t * K);
  expert_out.resize(t * K * H);
  expert_entries.resize(t * K);
  entry_tokens.resize(t * K);
  expert_count.resize(E);
  expert_start.resize(E + 1);
  used.resize(E);
  guess_list.resize(E);
  guess_mask.resize(E);
}

size_t MoeBuffers::bytes() const {
  size_t total = guess_mask.size();
  for (const auto* buf :
       {&router_logits, &expert_weights, &expert_out, &moe, &guess_xn, &guess_logits, &guess_weights})
    total += buf->size() * sizeof(float);
  for (const auto* buf : {&expert_ids, &expert_count, &expert_start, &expert_entries, &entry_tokens, &used,
                          &guess_ids, &guess_list})
    total += buf->size() * sizeof(int32_t);
  return total;
}

size_t MoeBuffers::bytes_for(size_t t, size_t H, size_t E, size_t K) {
  // floats: moe, guess_xn (tH); router_logits, guess_logits (tE); expert_weights, guess_weights (tK);
  // expert_out (tKH). int32: expert_ids, guess_ids, expert_entries, entry_tokens (tK); expert_count, used,
  // guess_list (E), expert_start (E + 1). guess_mask: E bytes.
  return (2 * t * H + 2 * t * E + 2 * t * K + t * K * H) * sizeof(float) +
         (4 * t * K + 3 * E + (E + 1)) * sizeof(int32_t) + E;
}

size_t group_by_expert(MoeBuffers& b, int64_t T, int k, int n_expert) {
  const int64_t K = k, E = n_expert;
  std::fill(b.expert_count.begin(), b.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i)
    ++b.expert_count[static_cast<size_t>(b.expert_ids[static_cast<size_t>(i)])];
  size_t n_used = 0;
  b.expert_start[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    b.expert_start[static_cast<size_t>(e + 1)] =
        b.expert_start[static_cast<size_t>(e)] + b.expert_count[static_cast<size_t>(e)];
    if (b.expert_count[static_cast<size_t>(e)] > 0) b.used[n_used++] = static_cast<int32_t>(e);
  }
  std::fill(b.expert_count.begin(), b.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i) {
    const size_t e = static_cast<size_t>(b.expert_ids[static_cast<size_t>(i)]);
    const size_t at = static_cast<size_t>(b.expert_start[e] + b.expert_count[e]++);
    b.expert_entries[at] = static_cast<int32_t>(i);
    b.entry_tokens[at] = static_cast<int32_t>(i / K);
  }
  return n_used;
}

size_t guessed_experts(MoeBuffers& b, int64_t T, int k, int n_expert) {
  std::fill(b.guess_mask.begin(), b.guess_mask.end(), 0);
  for (int64_t i = 0; i < T * k; ++i)
    b.guess_mask[static_cast<size_t>(b.guess_ids[static_cast<size_t>(i)])] = 1;
  size_t n = 0;
  for (int e = 0; e < n_expert; ++e)
    if (b.guess_mask[static_cast<size_t>(e)]) b.guess_list[n++] = e;
  return n;
}

void route_normed(backend::Backend& be, const RouterInputs& r, const float* x, int64_t T, int64_t n_embd,
                  std::span<uint8_t> scratch, float* xn, float* logits, int32_t* ids, float* weights) {
  be.rms_norm(x, T, n_embd, r.ffn_norm, r.eps, xn);
  be.matmul(r.router, xn, T, logits, scratch);
  be.route(r.params, logits, T, ids, weights);
}

// The experts go in waves: acquire the wave's experts in order, run them as one backend ffn() (on the CPU
// two parallel jobs over (expert, row block, token tile), so that even a decode step's k small experts keep
// every thread busy), release them. How this meets a provider whose acquire() blocks on a read:
// will_acquire() has issued every read of the layer beforehand, so the reads of a wave arrive together (in
// parallel on the device) and the wave's compute starts when its last expert is in — the first expert's
// compute no longer overlaps the later experts' reads, a trade of a few microseconds of compute for a split
// that uses every core; for a prefill chunk, a wave's compute overlaps the reads of the following waves. A
// wave of k experts pins no more than a decode step needs anyway.
void run_experts(backend::Backend& be, ExpertProvider& experts, int moe_index, MoeBuffers& b, size_t n_used,
                 ExpertWave& wave, const backend::ActivationParams& act, const ExpertBiases& biases,
                 const float* xn, int64_t T, int64_t n_embd, int64_t n_ff) {
  const int64_t H = n_embd, F = n_ff;
  experts.will_acquire(moe_index, std::span<const int32_t>(b.used.data(), n_used));
  const size_t wave_size = wave.tasks.size();  // k: what one decode step pins anyway
  for (size_t w0 = 0; w0 < n_used; w0 += wave_size) {
    const size_t n = std::min(wave_size, n_used - w0);
    WaveLeases leases(experts, moe_index, wave.ids.data());
    for (size_t i = 0; i < n; ++i) {
      const int32_t e = b.used[w0 + i];
      const ExpertView v = leases.acquire(e);
      const size_t start = static_cast<size_t>(b.expert_start[static_cast<size_t>(e)]);
      backend::FfnTask& task = wave.tasks[i];
      task.gate = v.gate_weight(H, F);
      task.up = v.up_weight(H, F);
      task.down = v.down_weight(H, F);
      task.gate_bias = biases.gate ? biases.gate + e * F : nullptr;
      task.up_bias = biases.up ? biases.up + e * F : nullptr;
      task.down_bias = biases.down ? biases.down + e * H : nullptr;
      task.in_rows = b.entry_tokens.data() + start;
      task.out_rows = b.expert_entries.data() + start;
      task.n_rows = b.expert_count[static_cast<size_t>(e)];
    }
    be.ffn(std::span<const backend::FfnTask>(wave.tasks.data(), n), act, xn, T, b.expert_out.data());
  }
}

void add_expert_outputs(backend::Backend& be, MoeBuffers& b, float* x, int64_t T, int k, int64_t n_embd) {
  be.moe_combine(b.expert_out.data(), b.expert_weights.data(), T, k, n_embd, b.moe.data());
  be.add(x, b.moe.data(), T * n_embd);
}

void capture_routing(ForwardCapture* capture, int moe_index, int64_t T, int k, const MoeBuffers& b) {
  if (!capture) return;
  const size_t off = static_cast<size_t>(moe_index) * static_cast<size_t>(T * k);
  std::copy_n(b.expert_ids.data(), T * k, capture->expert_ids.data() + off);
  std::copy_n(b.expert_weights.data(), T * k, capture->expert_weights.data() + off);
}

}  // namespace df::models
