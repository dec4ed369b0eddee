#include "engine/memory_plan.h"

#include <sys/resource.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "gguf/tensor_names.h"
#include "models/state_size.h"
#include "stream/byte_size.h"
#include "util/error.h"

namespace df {
namespace {

// glibc maps RLIMIT_STACK for each new thread (8 MiB when it is unlimited). Only the pages a thread touches
// are charged, so this is an upper bound.
uint64_t thread_stack_bytes() {
  constexpr uint64_t kDefault = uint64_t{8} << 20;
  rlimit r{};
  if (::getrlimit(RLIMIT_STACK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kDefault;
  return std::max<uint64_t>(r.rlim_cur, uint64_t{64} << 10);
}

std::string usable_source(const stream::MemorySnapshot& m) {
  if (!m.cgroup_limit) return fmt::format("MemAvailable {}", stream::format_bytes(m.mem_available));
  return fmt::format("MemAvailable {}, cgroup limit {} of which {} in use",
                     stream::format_bytes(m.mem_available), stream::format_bytes(*m.cgroup_limit),
                     stream::format_bytes(m.cgroup_usage));
}

}  // namespace

std::string MemoryReserve::describe() const {
  return fmt::format("trunk {} + state {} + session {} + thread stacks {} + runtime {}",
                     stream::format_bytes(trunk), stream::format_bytes(state), stream::format_bytes(session),
                     stream::format_bytes(stacks), stream::format_bytes(fixed));
}

MemoryReserve memory_reserve(const MemoryPlanInput& in) {
  MemoryReserve r;
  r.trunk = in.trunk_bytes;
  r.state = in.state_bytes;
  r.session = in.session_bytes;
  r.stacks = static_cast<uint64_t>(std::max(in.n_threads, 1) + kOtherThreads) * in.stack_bytes;
  r.fixed = kFixedOverhead + kMetadataFactor * in.metadata_bytes;
  return r;
}

MemoryReserve check_memory(const MemoryPlanInput& in, const stream::MemorySnapshot& memory) {
  if (in.n_ctx < 1) fail("context size -c {} must be at least 1", in.n_ctx);
  if (in.n_ctx_train > 0 && in.n_ctx > in.n_ctx_train)
    fail("context size -c {} is larger than the {} tokens the model was trained for: pass -c {} or less",
         in.n_ctx, in.n_ctx_train, in.n_ctx_train);
  const MemoryReserve r = memory_reserve(in);
  const uint64_t usable = memory.usable(), reserve = r.total();
  const uint64_t experts =
      in.resident ? in.resident_expert_bytes : std::max<uint64_t>(in.min_records, 1) * in.record_bytes;
  if (reserve + experts > usable) {
    const std::string for_experts =
        experts == 0 ? ""
                     : fmt::format(", and {} for {}", stream::format_bytes(experts),
                                   in.resident ? "the resident experts" : "the smallest expert cache");
    fail(
        "context {} needs {} of memory ({}{}) but only {} is usable ({}): lower the context size (-c) or "
        "free memory",
        in.n_ctx, stream::format_bytes(reserve + experts), r.describe(), for_experts,
        stream::format_bytes(usable), usable_source(memory));
  }
  return r;
}

MemoryPlan plan_memory(const MemoryPlanInput& in, const stream::MemorySnapshot& memory) {
  MemoryPlan plan;
  plan.reserve = check_memory(in, memory);
  const uint64_t usable = memory.usable(), reserve = plan.reserve.total();
  if (in.resident) {
    plan.description = fmt::format("experts: all resident in RAM (--resident); reserve {} ({})",
                                   stream::format_bytes(reserve), plan.reserve.describe());
    return plan;
  }
  stream::BudgetRequest br;
  br.explicit_bytes = in.expert_cache_bytes;
  br.reserve_bytes = reserve;
  br.reserve_description = plan.reserve.describe();
  br.record_bytes = in.record_bytes;
  br.total_records = in.total_records;
  br.min_records = in.min_records;
  plan.cache = stream::choose_expert_budget(br, memory);
  plan.description = plan.cache.description;
  if (!plan.cache.automatic && reserve + plan.cache.bytes > usable)
    plan.warning = fmt::format(
        "warning: --expert-cache {} and the {} the rest of the run needs ({}) exceed the {} usable ({}): the "
        "run "
        "may be OOM-killed",
        stream::format_bytes(plan.cache.bytes), stream::format_bytes(reserve), plan.reserve.describe(),
        stream::format_bytes(usable), usable_source(memory));
  return plan;
}

uint64_t automatic_device_slots(uint64_t free_bytes, uint64_t n_records, uint64_t record_bytes,
                                uint64_t min_slots, int sharers, const std::string& device) {
  const uint64_t keep = std::max<uint64_t>(uint64_t{1} << 30, free_bytes / 10);
  const uint64_t usable =
      (free_bytes > keep ? free_bytes - keep : 0) / static_cast<uint64_t>(std::max(sharers, 1));
  const uint64_t slots = std::min(n_records, usable / std::max<uint64_t>(record_bytes, 1));
  if (slots < min_slots)
    fail(
        "--device {}: {} of device memory is free after the trunk{}; the experts need at least {} for one "
        "layer's {} records (and --gpu-cache more for speed)",
        device, stream::format_bytes(free_bytes),
        sharers > 1 ? fmt::format(", shared by the {} tiers still to be made on it", sharers) : "",
        stream::format_bytes(min_slots * record_bytes * static_cast<uint64_t>(std::max(sharers, 1)) + keep),
        min_slots);
  return slots;
}

MemoryPlanInput memory_plan_input(const gguf::File& trunk, int n_ctx, int n_batch, int n_threads,
                                  int snapshot_states) {
  MemoryPlanInput in;
  for (const auto& t : trunk.tensors())
    if (!gguf::is_routed_expert_weight(t.name)) in.trunk_bytes += t.nbytes;
  in.n_ctx = n_ctx;
  in.n_threads = std::max(n_threads, 1);
  in.n_ctx_train = static_cast<int>(std::clamp<int64_t>(
      trunk.get_int(trunk.architecture() + ".context_length").value_or(0), 0, int64_t{1} << 30));
  // The batch buffers grow to the largest prefill chunk, which is at most the context.
  const int batch = std::clamp(n_batch, 1, std::max(n_ctx, 1));
  const models::StateDims dims = models::state_dims(trunk);
  in.state_bytes =
      models::state_bytes(dims, n_ctx, batch, in.n_threads) +
      static_cast<uint64_t>(std::max(snapshot_states, 0)) * models::state_bytes(dims, n_ctx, 0, in.n_threads);
  const auto* embd = trunk.find_tensor("token_embd.weight");
  const uint64_t n_vocab = embd ? static_cast<uint64_t>(embd->ne[1]) : 0;
  // Session: logits (float) and token history (int32, also kept by the generation loop); sampler: candidates
  // (id + logit) and the penalized logits.
  in.session_bytes = n_vocab * (4 + 8 + 4) + static_cast<uint64_t>(std::max(n_ctx, 0)) * 2 * sizeof(int32_t);
  in.metadata_bytes = trunk.data_offset();
  in.stack_bytes = thread_stack_bytes();
  return in;
}

}  // namespace df
