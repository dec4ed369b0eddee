#include "server/metrics.h"

#include <fmt/format.h>

namespace df::server {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP diskformer_{0} {1}\n# TYPE diskformer_{0} {2}\ndiskformer_{0} {3}\n", name, help,
                     type, value);
}

double decode_tps(const SchedulerCounters& c) {
  const double s = static_cast<double>(c.decode_ns.load()) * 1e-9;
  return s > 0 ? static_cast<double>(c.generated_tokens.load()) / s : 0;
}

double prompt_tps(const SchedulerCounters& c) {
  const double s = static_cast<double>(c.prompt_ns.load()) * 1e-9;
  return s > 0 ? static_cast<double>(c.prompt_tokens.load()) / s : 0;
}

double layer_hit_rate(const stream::LayerCounters& l) {
  return l.accesses ? static_cast<double>(l.hits) / static_cast<double>(l.accesses) : 0;
}

}  // namespace

std::string prometheus_text(const SchedulerCounters& c, int n_slots,
                            const std::optional<stream::TelemetrySnapshot>& cache) {
  std::string out;
  metric(out, "requests_total", "counter", "Requests finished (answered, failed or cancelled).",
         static_cast<double>(c.requests.load()));
  metric(out, "requests_failed_total", "counter", "Requests that failed on the server's side.",
         static_cast<double>(c.failed.load()));
  metric(out, "requests_cancelled_total", "counter", "Requests whose client went away before the end.",
         static_cast<double>(c.cancelled.load()));
  metric(out, "prompt_tokens_total", "counter", "Prompt tokens run through the model.",
         static_cast<double>(c.prompt_tokens.load()));
  metric(out, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.",
         static_cast<double>(c.cached_tokens.load()));
  metric(out, "tokens_generated_total", "counter", "Tokens generated.",
         static_cast<double>(c.generated_tokens.load()));
  metric(out, "prompt_seconds_total", "counter", "Time spent prefilling prompts.",
         static_cast<double>(c.prompt_ns.load()) * 1e-9);
  metric(out, "decode_seconds_total", "counter", "Time spent in decode steps.",
         static_cast<double>(c.decode_ns.load()) * 1e-9);
  metric(out, "decode_forwards_total", "counter", "Decode forwards (each carries every slot that decodes).",
         static_cast<double>(c.decode_forwards.load()));
  metric(out, "decode_sequences_total", "counter",
         "Sequences carried by the decode forwards (over decode_forwards_total: the mean batch).",
         static_cast<double>(c.decode_sequences.load()));
  metric(out, "mixed_forwards_total", "counter", "Forwards that carried prompt chunks beside decode steps.",
         static_cast<double>(c.mixed_forwards.load()));
  metric(out, "prompt_tokens_per_second", "gauge", "Prompt tokens per second of prefill time.",
         prompt_tps(c));
  metric(out, "decode_tokens_per_second", "gauge", "Generated tokens per second of decode time.",
         decode_tps(c));
  metric(out, "recent_tokens_per_second", "gauge",
         "Generated tokens per second over the last steps (all slots).", c.recent_tokens_per_second.load());
  metric(out, "queue_depth", "gauge", "Requests waiting for a slot.", c.queued.load());
  metric(out, "slots_busy", "gauge", "Slots running a request.", c.busy_slots.load());
  metric(out, "slots_total", "gauge", "Slots (-np).", n_slots);
  if (cache) {
    metric(out, "expert_cache_hit_rate", "gauge", "Expert acquisitions that needed no new read.",
           cache->hit_rate());
    metric(out, "expert_bytes_read_total", "counter", "Bytes of experts read from the store.",
           static_cast<double>(cache->total.bytes_read));
    metric(out, "expert_bytes_per_token", "gauge", "Expert bytes read per token run through the model.",
           cache->bytes_per_token());
    metric(out, "expert_io_wait_share", "gauge", "Share of step time spent waiting for expert reads.",
           cache->io_wait_share());
    metric(out, "expert_read_failures_total", "counter", "Expert reads that failed.",
           static_cast<double>(cache->total.read_failures));
    out += "# HELP diskformer_expert_cache_layer_hit_rate Expert cache hit rate of one MoE layer.\n";
    out += "# TYPE diskformer_expert_cache_layer_hit_rate gauge\n";
    for (size_t l = 0; l < cache->layers.size(); ++l)
      out += fmt::format("diskformer_expert_cache_layer_hit_rate{{layer=\"{}\"}} {}\n", l,
                         layer_hit_rate(cache->layers[l]));
  }
  return out;
}

nlohmann::json stats_json(const SchedulerCounters& c, int n_slots,
                          const std::optional<stream::TelemetrySnapshot>& cache) {
  nlohmann::json j = {{"requests", c.requests.load()},
                      {"tokens_generated", c.generated_tokens.load()},
                      {"prompt_tokens", c.prompt_tokens.load()},
                      {"decode_tokens_per_second", decode_tps(c)},
                      {"recent_tokens_per_second", c.recent_tokens_per_second.load()},
                      {"queue_depth", c.queued.load()},
                      {"slots_busy", c.busy_slots.load()},
                      {"slots_total", n_slots}};
  if (cache) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : cache->layers) layers.push_back(layer_hit_rate(l));
    j["expert_cache"] = {{"hit_rate", cache->hit_rate()},
                         {"bytes_per_token", cache->bytes_per_token()},
                         {"io_wait_share", cache->io_wait_share()},
                         {"layer_hit_rate", layers}};
  } else {
    j["expert_cache"] = nullptr;
  }
  return j;
}

}  // namespace df::server
