#include "models/moe_block.h"

#include <algorithm>

#include "models/sequence_state.h"

namespace df::models {

void MoeBuffers::reserve(backend::Backend& be, size_t t, size_t H, size_t E, size_t K) {
  guess_xn.resize(be, t * H, "MoE batch buffers");
  router_logits.resize(be, t * E, "router logits");
  guess_logits.resize(be, t * E, "router logits");
  expert_ids.resize(be, t * K, "routing ids");
  expert_weights.resize(be, t * K, "routing weights");
  guess_ids.resize(be, t * K, "routing ids");
  guess_weights.resize(be, t * K, "routing weights");
  expert_out.resize(be, t * K * H, "expert outputs");
  expert_entries_dev.resize(be, t * K, "expert row lists");
  entry_tokens_dev.resize(be, t * K, "expert row lists");
  expert_ids_host.resize(t * K);
  guess_ids_host.resize(t * K);
  expert_entries.resize(t * K);
  entry_tokens.resize(t * K);
  expert_count.resize(E);
  expert_start.resize(E + 1);
  used.resize(E);
  guess_list.resize(E);
  guess_mask.resize(E);
}

size_t MoeBuffers::bytes() const {
  size_t total = guess_mask.size() +
                 (grouped_out.size() + xn_host.size() + rows_host.size()) * sizeof(float) +
                 grouped_pos_dev.bytes() + positions_dev.bytes() +
                 (grouped_pos.size() + positions.size()) * sizeof(int32_t);
  for (const PartBuffers& p : part_buffers)
    total += p.xn.bytes() + p.out.bytes() + p.in_rows.bytes() + p.positions.bytes();
  for (const auto* buf :
       {&router_logits, &expert_weights, &expert_out, &guess_xn, &guess_logits, &guess_weights})
    total += buf->size() * sizeof(float);
  for (const auto* buf : {&expert_ids_host, &expert_count, &expert_start, &expert_entries, &entry_tokens,
                          &used, &guess_ids_host, &guess_list})
    total += buf->size() * sizeof(int32_t);
  for (const auto* buf : {&expert_ids, &guess_ids, &expert_entries_dev, &entry_tokens_dev})
    total += buf->bytes();
  return total;
}

size_t MoeBuffers::bytes_for(size_t t, size_t H, size_t E, size_t K) {
  // floats: guess_xn (tH); router_logits, guess_logits (tE); expert_weights, guess_weights (tK);
  // expert_out (tKH). int32: expert_ids, guess_ids and their host copies, expert_entries, entry_tokens and
  // their uploads (tK); expert_count, used, guess_list (E), expert_start (E + 1). guess_mask: E bytes.
  return (t * H + 2 * t * E + 2 * t * K + t * K * H) * sizeof(float) +
         (8 * t * K + 3 * E + (E + 1)) * sizeof(int32_t) + E;
}

size_t group_by_expert(MoeBuffers& b, int64_t T, int k, int n_expert) {
  const int64_t K = k, E = n_expert;
  std::fill(b.expert_count.begin(), b.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i)
    ++b.expert_count[static_cast<size_t>(b.expert_ids_host[static_cast<size_t>(i)])];
  size_t n_used = 0;
  b.expert_start[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    b.expert_start[static_cast<size_t>(e + 1)] =
        b.expert_start[static_cast<size_t>(e)] + b.expert_count[static_cast<size_t>(e)];
    if (b.expert_count[static_cast<size_t>(e)] > 0) b.used[n_used++] = static_cast<int32_t>(e);
  }
  std::fill(b.expert_count.begin(), b.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i) {
    const size_t e = static_cast<size_t>(b.expert_ids_host[static_cast<size_t>(i)]);
    const size_t at = static_cast<size_t>(b.expert_start[e] + b.expert_count[e]++);
    b.expert_entries[at] = static_cast<int32_t>(i);
    b.entry_tokens[at] = static_cast<int32_t>(i / K);
  }
  return n_used;
}

size_t fetch_groups(backend::Backend& be, MoeBuffers& b, int64_t T, int k, int n_expert) {
  be.download(b.expert_ids_host.data(), b.expert_ids.view(), static_cast<size_t>(T * k));
  return group_by_expert(b, T, k, n_expert);
}

void upload_groups(backend::Backend& be, MoeBuffers& b, int64_t T, int k) {
  const size_t entries = static_cast<size_t>(T * k);
  be.upload(b.expert_entries_dev.view(), b.expert_entries.data(), entries);
  be.upload(b.entry_tokens_dev.view(), b.entry_tokens.data(), entries);
}

size_t guessed_experts(MoeBuffers& b, int64_t T, int k, int n_expert) {
  std::fill(b.guess_mask.begin(), b.guess_mask.end(), 0);
  for (int64_t i = 0; i < T * k; ++i)
    b.guess_mask[static_cast<size_t>(b.guess_ids_host[static_cast<size_t>(i)])] = 1;
  size_t n = 0;
  for (int e = 0; e < n_expert; ++e)
    if (b.guess_mask[static_cast<size_t>(e)]) b.guess_list[n++] = e;
  return n;
}

void route_normed(backend::Backend& be, const RouterInputs& r, backend::Buf<const float> x, int64_t T,
                  int64_t n_embd, backend::Buf<uint8_t> scratch, const RoutingOut& out) {
  be.norm_route(r.params, x, T, n_embd, r.ffn_norm, r.eps, r.router, scratch, out.xn, out.logits, out.ids,
                out.weights);
}

namespace {

// Where one wave's FFNs read and write: the entry at grouped position `at` (expert e's are
// expert_start[e] ..) reads input row in_rows[at - base] and writes output row out_rows[at - base].
struct WaveRows {
  backend::Buf<const int32_t> in_rows, out_rows;
  size_t base = 0;
};

// The experts go in waves: acquire the wave's experts in order, run them as one backend ffn() (on the CPU
// two parallel jobs over (expert, row block, token tile), so that even a decode step's k small experts keep
// every thread busy), release them. How this meets a provider whose acquire() blocks on a read:
// will_acquire() has issued every read of the layer beforehand, so the reads of a wave arrive together (in
// parallel on the device) and the wave's compute starts when its last expert is in — the first expert's
// compute no longer overlaps the later experts' reads, a trade of a few microseconds of compute for a split
// that uses every core; for a prefill chunk, a wave's compute overlaps the reads of the following waves. A
// wave of k experts pins no more than a decode step needs anyway.
void run_waves(backend::Backend& be, ExpertProvider& experts, int moe_index, const MoeBuffers& b,
               std::span<const int32_t> used, ExpertWave& wave, const backend::ActivationParams& act,
               const ExpertBiases& biases, const WaveRows& rows, backend::Buf<const float> xn, int64_t T,
               int64_t n_embd, int64_t n_ff, backend::Buf<float> out) {
  const int64_t H = n_embd, F = n_ff;
  const size_t n_used = used.size();
  experts.will_acquire(moe_index, used);
  // k: what one decode step pins anyway; a provider that can hold more at once (every expert resident, or a
  // device tier whose slots will_acquire has just pinned) gets fewer, larger waves: one backend ffn() for
  // the whole layer where it can, which saves a launch set and a host trip per k experts.
  const size_t held = experts.max_held(moe_index);
  const size_t wave_size = held > 0 ? std::min(held, n_used) : wave.k;
  for (size_t w0 = 0; w0 < n_used; w0 += wave_size) {
    const size_t n = std::min(wave_size, n_used - w0);
    WaveLeases leases(experts, moe_index, wave.ids.data());
    for (size_t i = 0; i < n; ++i) {
      const int32_t e = used[w0 + i];
      const ExpertView v = leases.acquire(e);
      const size_t start = static_cast<size_t>(b.expert_start[static_cast<size_t>(e)]) - rows.base;
      const size_t count = static_cast<size_t>(b.expert_count[static_cast<size_t>(e)]);
      const size_t ue = static_cast<size_t>(e), uf = static_cast<size_t>(F), uh = static_cast<size_t>(H);
      backend::FfnTask& task = wave.tasks[i];
      task.gate = v.gate_weight(H, F);
      task.up = v.up_weight(H, F);
      task.down = v.down_weight(H, F);
      task.gate_bias = biases.gate ? biases.gate.sub(ue * uf, uf) : backend::Buf<const float>{};
      task.up_bias = biases.up ? biases.up.sub(ue * uf, uf) : backend::Buf<const float>{};
      task.down_bias = biases.down ? biases.down.sub(ue * uh, uh) : backend::Buf<const float>{};
      task.out_scale = biases.down_scale_host.empty() ? 1.0f : biases.down_scale_host[ue];
      task.in_rows = rows.in_rows.sub(start, count);
      task.out_rows = rows.out_rows.sub(start, count);
      task.n_rows = static_cast<int64_t>(count);
    }
    be.ffn(std::span<const backend::FfnTask>(wave.tasks.data(), n), act, xn, T, out);
  }
}

// 0, 1, ..., n - 1 in a backend's memory (uploaded again only when the array grows).
void ensure_positions(backend::Backend& be, DeviceArray<int32_t>& dev, std::vector<int32_t>& host, size_t n) {
  if (n > dev.capacity()) {
    for (size_t i = host.size(); i < n; ++i) host.push_back(static_cast<int32_t>(i));
    dev.resize(be, n, "expert row lists");
    be.upload(dev.view(), host.data(), n);
    return;
  }
  dev.resize(be, n, "expert row lists");
}

// The experts of a layer spread over several backends (ExpertProvider::parts): the routing read back and
// grouped by expert (each part's experts are a contiguous range, so its entries are a contiguous block of
// the grouped order); each part on another backend gets a copy of xn and its block's input rows, runs its
// FFNs there (queued first, so that a device computes while the model's backend runs its own part) and
// sends its block back into grouped_out; gather_rows puts every result in (token, slot) order and the
// combine is the one the unsplit model runs. Each result row is the bits its expert's FFN gives on that row
// wherever it runs (Backend::ffn's promise), so the output is the unsplit model's on backends of one kind.
void add_spread_experts(backend::Backend& be, ExpertProvider& experts,
                        std::span<const experts::ExpertPart> parts, int moe_index, MoeBuffers& b,
                        ExpertWave& wave, const ExpertFfn& f, backend::Buf<const float> xn, int64_t T,
                        backend::Buf<float> x) {
  const size_t entries = static_cast<size_t>(T * f.k), H = static_cast<size_t>(f.n_embd);
  const size_t n_used = fetch_groups(be, b, T, f.k, f.n_expert);
  const std::span<const int32_t> used(b.used.data(), n_used);
  b.grouped_pos.resize(entries);
  for (size_t at = 0; at < entries; ++at)
    b.grouped_pos[static_cast<size_t>(b.expert_entries[at])] = static_cast<int32_t>(at);
  b.grouped_pos_dev.resize(be, entries, "expert row lists");
  be.upload(b.grouped_pos_dev.view(), b.grouped_pos.data(), entries);
  b.grouped_out.resize(be, entries * H, "expert outputs");
  ensure_positions(be, b.positions_dev, b.positions, entries);
  if (b.part_buffers.size() < parts.size()) b.part_buffers.resize(parts.size());

  struct Block {
    std::span<const int32_t> used;
    size_t base = 0, rows = 0;
  };
  const auto block_of = [&](const experts::ExpertPart& p) {
    const auto lo = std::lower_bound(used.begin(), used.end(), p.first_expert);
    const auto hi = std::lower_bound(lo, used.end(), p.end_expert);
    const size_t base = static_cast<size_t>(b.expert_start[static_cast<size_t>(p.first_expert)]);
    return Block{std::span<const int32_t>(lo, hi), base,
                 static_cast<size_t>(b.expert_start[static_cast<size_t>(p.end_expert)]) - base};
  };
  bool xn_on_host = false, local_rows = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Block blk = block_of(parts[i]);
    if (blk.rows == 0) continue;
    if (parts[i].backend == &be) {
      local_rows = true;
      continue;
    }
    backend::Backend& pbe = *parts[i].backend;
    MoeBuffers::PartBuffers& pb = b.part_buffers[i];
    if (!xn_on_host) {
      b.xn_host.resize(static_cast<size_t>(T) * H);
      be.download(b.xn_host.data(), xn, static_cast<size_t>(T) * H);
      xn_on_host = true;
    }
    pb.xn.resize(pbe, static_cast<size_t>(T) * H, "MoE batch buffers");
    pbe.upload(pb.xn.view(), b.xn_host.data(), static_cast<size_t>(T) * H);
    pb.in_rows.resize(pbe, blk.rows, "expert row lists");
    pbe.upload(pb.in_rows.view(), b.entry_tokens.data() + blk.base, blk.rows);
    ensure_positions(pbe, pb.positions, b.positions, blk.rows);
    pb.out.resize(pbe, blk.rows * H, "expert outputs");
    const ExpertBiases on_part{experts.part_copy(i, f.biases.gate),
                               experts.part_copy(i, f.biases.up),
                               experts.part_copy(i, f.biases.down),
                               {},
                               f.biases.down_scale_host};
    run_waves(pbe, experts, moe_index, b, blk.used, wave, f.act, on_part,
              {pb.in_rows.view(), pb.positions.view(), blk.base}, pb.xn.view(), T, f.n_embd, f.n_ff,
              pb.out.view());
  }
  if (local_rows) {
    be.upload(b.entry_tokens_dev.view(), b.entry_tokens.data(), entries);
    for (const experts::ExpertPart& p : parts) {
      const Block blk = block_of(p);
      if (blk.rows == 0 || p.backend != &be) continue;
      run_waves(be, experts, moe_index, b, blk.used, wave, f.act, f.biases,
                {b.entry_tokens_dev.view().sub(blk.base), b.positions_dev.view(), blk.base}, xn, T, f.n_embd,
                f.n_ff, b.grouped_out.view().sub(blk.base * H, blk.rows * H));
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const Block blk = block_of(parts[i]);
    if (blk.rows == 0 || parts[i].backend == &be) continue;
    b.rows_host.resize(std::max(b.rows_host.size(), blk.rows * H));
    parts[i].backend->download(b.rows_host.data(), b.part_buffers[i].out.view(), blk.rows * H);
    be.upload(b.grouped_out.view().sub(blk.base * H, blk.rows * H), b.rows_host.data(), blk.rows * H);
  }
  be.gather_rows(b.grouped_out.view(), f.n_embd, b.grouped_pos_dev.view(), static_cast<int64_t>(entries),
                 b.expert_out.view());
  be.moe_combine_add(b.expert_out.view(), b.expert_weights.view(), T, f.k, f.n_embd, x);
}

}  // namespace

void run_experts(backend::Backend& be, ExpertProvider& experts, int moe_index, MoeBuffers& b, size_t n_used,
                 ExpertWave& wave, const backend::ActivationParams& act, const ExpertBiases& biases,
                 backend::Buf<const float> xn, int64_t T, int64_t n_embd, int64_t n_ff) {
  run_waves(be, experts, moe_index, b, std::span<const int32_t>(b.used.data(), n_used), wave, act, biases,
            {b.entry_tokens_dev.view(), b.expert_entries_dev.view(), 0}, xn, T, n_embd, n_ff,
            b.expert_out.view());
}

void add_experts(backend::Backend& be, ExpertProvider& experts, int moe_index, MoeBuffers& b,
                 ExpertWave& wave, const ExpertFfn& f, backend::Buf<const float> xn, int64_t T,
                 backend::Buf<float> x) {
  if (const auto parts = experts.parts(moe_index); !parts.empty()) {
    add_spread_experts(be, experts, parts, moe_index, b, wave, f, xn, T, x);
    return;
  }
  // The routed op on experts the provider holds in the backend's memory (resident stacks or a device tier).
  const auto routed_add = [&](backend::RoutedExperts& ex) {
    ex.gate_bias = f.biases.gate;
    ex.up_bias = f.biases.up;
    ex.down_bias = f.biases.down;
    ex.down_scale = f.biases.down_scale;
    be.routed_ffn_add(ex, f.act, b.expert_ids.view(), b.expert_weights.view(), T, f.k, xn,
                      b.expert_out.view(), x);
  };
  std::optional<backend::RoutedExperts> ex;
  if (T <= be.max_routed_tokens()) ex = experts.resident_stacks(moe_index);
  if (ex) {
    routed_add(*ex);
    return;
  }
  const size_t n_used = fetch_groups(be, b, T, f.k, f.n_expert);
  if (T <= be.max_routed_tokens()) {
    // Experts in a device tier: the same routed op as resident stacks, through the expert->slot map (it
    // reads the ids on the device: the groups' row lists need not go up).
    const std::span<const int32_t> used(b.used.data(), n_used);
    ex = experts.routed_slots(moe_index, used,
                              experts::RoutedOp{f.act, f.k, static_cast<bool>(f.biases.gate || f.biases.up)});
    if (ex) {
      routed_add(*ex);
      experts.release_routed(moe_index, used);
      return;
    }
  }
  upload_groups(be, b, T, f.k);
  run_experts(be, experts, moe_index, b, n_used, wave, f.act, f.biases, xn, T, f.n_embd, f.n_ff);
  be.moe_combine_add(b.expert_out.view(), b.expert_weights.view(), T, f.k, f.n_embd, x);
}

void report_routing(backend::Backend& be, RoutingSink* sink, int moe_index, const SequenceBatch& batch, int k,
                    MoeBuffers& b) {
  if (!sink) return;
  be.download(b.expert_ids_host.data(), b.expert_ids.view(), static_cast<size_t>(batch.T * k));
  for (const BatchSegment& s : batch.segments)
    sink->routed(
        moe_index, s.n_past,
        std::span<const int32_t>(b.expert_ids_host.data() + s.row0 * k, static_cast<size_t>(s.rows * k)),
        s.rows, k);
}

void capture_routing(backend::Backend& be, ForwardCapture* capture, int moe_index, int64_t T, int k,
                     const MoeBuffers& b) {
  if (!capture) return;
  const size_t off = static_cast<size_t>(moe_index) * static_cast<size_t>(T * k);
  be.download(capture->expert_ids.data() + off, b.expert_ids.view(), static_cast<size_t>(T * k));
  be.download(capture->expert_weights.data() + off, b.expert_weights.view(), static_cast<size_t>(T * k));
}

}  // namespace df::models
