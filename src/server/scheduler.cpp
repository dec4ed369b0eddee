#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>

#include "server/text_filters.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"

namespace df::server {
namespace {

using clock_type = std::chrono::steady_clock;

uint64_t ns_since(clock_type::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
}

// log-softmax of the raw logits at `token`, and the `top` most likely tokens (best first, lowest id on a
// tie).
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top) {
  float max = -INFINITY;
  for (float l : logits) max = std::max(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const double log_z = static_cast<double>(max) + std::log(sum);
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - log_z);
  if (top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t n = std::min(ids.size(), static_cast<size_t>(top));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) {
                        const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                        return la > lb || (la == lb && a < b);
                      });
    for (size_t i = 0; i < n; ++i)
      r.top.emplace_back(
          ids[i], static_cast<float>(static_cast<double>(logits[static_cast<size_t>(ids[i])]) - log_z));
  }
  return r;
}

}  // namespace

struct Scheduler::Slot {
  int id = 0;
  std::unique_ptr<Session> session;
  uint64_t last_used = 0;
  // The request running here, and its generation state.
  std::shared_ptr<Job> job;
  std::optional<Sampler> sampler;
  std::optional<tok::StreamDecoder> decoder;
  std::optional<StopMatcher> stop;
  std::optional<ReasoningSplitter> think;
  std::span<const float> logits;
  bool started = false;
  bool prefilling = false;  // its prompt's chunks are still to run
  clock_type::time_point prompt_t0;
  Outcome out;
};

Scheduler::Scheduler(OpenedModel& model, int n_slots, int n_ctx) : m_(model), n_ctx_(n_ctx) {
  if (n_slots < 1) fail("-np {}: at least one slot is needed", n_slots);
  for (int i = 0; i < n_slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = i;
    // As the CLI's sessions: telemetry per step, clean-up after a failed step, the routing recorder told
    // where each prompt starts; plus the prompt snapshot of chats.
    s->session = std::make_unique<Session>(*m_.model, n_ctx, m_.prefill_chunk);
    s->session->on_step = [this](uint64_t tokens, uint64_t ns) { m_.on_step(tokens, ns); };
    s->session->on_failure = [this] { m_.on_failure(); };
    if (m_.routing)
      s->session->on_prefill = [rec = m_.routing.get()](int prompt_tokens) {
        rec->begin_prompt(prompt_tokens);
      };
    s->session->keep_prompt_snapshot();
    slots_.push_back(std::move(s));
  }
  // One forward carries every slot, and at most the prefill chunk's rows (what the states' batch buffers
  // were planned for). A backend whose results depend on the batch beyond some rows (CUDA: its tensor-core
  // tiles) keeps a sequence's answer the same alone or beside others only within them: its forwards carry
  // at most that many decode steps, and prompts run alone in the chunks a lone request's would.
  const int64_t invariant = m_.batch_invariant_rows();
  const size_t chunk = static_cast<size_t>(std::max(1, m_.prefill_chunk));
  size_t per_forward = static_cast<size_t>(n_slots);
  if (invariant > 0) per_forward = std::min(per_forward, static_cast<size_t>(invariant));
  mix_prompts_ = invariant == 0 || static_cast<int64_t>(chunk) <= invariant;
  batch_ = std::make_unique<SessionBatch>(per_forward, mix_prompts_ ? chunk : per_forward);
  prompt_batch_ = std::make_unique<SessionBatch>(1, chunk);
  for (auto* b : {batch_.get(), prompt_batch_.get()}) {
    b->on_step = [this](uint64_t tokens, uint64_t ns) { m_.on_step(tokens, ns); };
    b->on_failure = [this] { m_.on_failure(); };
  }
  alone_.reserve(1);
  in_batch_.reserve(static_cast<size_t>(n_slots));
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      Outcome o;
      o.error_status = 503;
      o.error = "the server is shutting down";
      job->finish(o);
      return;
    }
    queue_.push_back(std::move(job));
    counters_.queued.store(static_cast<int>(queue_.size()));
  }
  cv_.notify_all();
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::admit(std::unique_lock<std::mutex>&) {
  while (!queue_.empty()) {
    Slot* best = nullptr;
    size_t best_common = 0;
    const auto& prompt = queue_.front()->req.prompt;
    for (auto& s : slots_) {
      if (s->job) continue;
      const auto& have = s->session->tokens();
      size_t common = 0;
      while (common < have.size() && common < prompt.size() && have[common] == prompt[common]) ++common;
      if (!best || common > best_common || (common == best_common && s->last_used < best->last_used)) {
        best = s.get();
        best_common = common;
      }
    }
    if (!best) break;
    best->job = std::move(queue_.front());
    queue_.pop_front();
    best->last_used = ++clock_;
    best->started = false;
  }
  counters_.queued.store(static_cast<int>(queue_.size()));
  int busy = 0;
  for (auto& s : slots_) busy += s->job != nullptr;
  counters_.busy_slots.store(busy);
}

void Scheduler::loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      admit(lock);
      const bool any = std::any_of(slots_.begin(), slots_.end(), [](auto& s) { return s->job != nullptr; });
      if (stopping_) break;
      if (!any) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    const auto t0 = clock_type::now();
    const uint64_t before = counters_.generated_tokens.load();
    // Decode steps first (each slot's next token), then prompt chunks in the rows left.
    for (auto& s : slots_)
      if (s->job) step(*s);
    for (auto& s : slots_)
      if (s->job && s->prefilling) add_prompt_chunk(*s);
    run_batch();
    counters_.steps.fetch_add(1);
    const double secs = static_cast<double>(ns_since(t0)) * 1e-9;
    const double tps = secs > 0 ? static_cast<double>(counters_.generated_tokens.load() - before) / secs : 0;
    const double prev = counters_.recent_tokens_per_second.load();
    counters_.recent_tokens_per_second.store(prev == 0 ? tps : 0.8 * prev + 0.2 * tps);
  }
  // Shutting down: nothing more runs.
  std::unique_lock lock(mu_);
  Outcome o;
  o.error_status = 503;
  o.error = "the server is shutting down";
  for (auto& j : queue_) j->finish(o);
  queue_.clear();
  for (auto& s : slots_)
    if (s->job) {
      s->job->finish(o);
      s->job.reset();
    }
}

void Scheduler::finish(Slot& slot, Outcome o) {
  o.slot = slot.id;
  counters_.requests.fetch_add(1);
  if (o.error_status >= 500) counters_.failed.fetch_add(1);
  // The slot is free, and counted free, before the client hears back: a client that reads /metrics right
  // after its reply must not see its own request still holding the slot (CI caught that race under ASan).
  auto job = std::move(slot.job);
  slot.job = nullptr;
  slot.prefilling = false;
  slot.sampler.reset();
  slot.decoder.reset();
  slot.stop.reset();
  slot.think.reset();
  slot.logits = {};
  {
    std::lock_guard lock(mu_);
    int busy = 0;
    for (auto& s : slots_) busy += s->job != nullptr;
    counters_.busy_slots.store(busy);
  }
  job->finish(std::move(o));
}

void Scheduler::start(Slot& slot) {
  const GenRequest& r = slot.job->req;
  slot.out = Outcome{};
  slot.out.prompt_tokens = static_cast<int>(r.prompt.size());
  slot.sampler.emplace(m_.model->info().n_vocab, r.sampling);
  slot.decoder.emplace(*m_.tokenizer, /*unparse_special=*/true);
  slot.stop.emplace(r.stop);
  slot.think.emplace(r.extract_reasoning, r.opens_reasoning,
                     r.harmony          ? ReasoningFormat::harmony()
                     : r.gemma_channels ? ReasoningFormat::gemma4()
                                        : ReasoningFormat::think());
  const size_t history = static_cast<size_t>(r.sampling.repeat_last_n);
  for (size_t i = r.prompt.size() > history ? r.prompt.size() - history : 0; i < r.prompt.size(); ++i)
    slot.sampler->accept(r.prompt[i]);
  slot.prompt_t0 = clock_type::now();
  slot.started = true;
  slot.prefilling = slot.session->begin_prefill(r.prompt) > 0;
  if (!slot.prefilling) prompt_finished(slot);  // every token was cached
}

void Scheduler::prompt_finished(Slot& slot) {
  slot.prefilling = false;
  slot.logits = slot.session->logits();
  slot.out.prompt_ms = static_cast<double>(ns_since(slot.prompt_t0)) * 1e-6;
  slot.out.cached_tokens = slot.session->stats().tokens_reused;
  counters_.prompt_tokens.fetch_add(static_cast<uint64_t>(slot.session->stats().tokens_evaluated));
  counters_.cached_tokens.fetch_add(static_cast<uint64_t>(slot.out.cached_tokens));
}

void Scheduler::add_prompt_chunk(Slot& slot) {
  if (slot.job->cancelled()) return;  // dropped at its next turn
  if (!mix_prompts_) {
    prompt_batch_->add_prompt_chunk(*slot.session, static_cast<size_t>(m_.prefill_chunk));
    alone_.push_back(&slot);
    return run_batch(*prompt_batch_, alone_);
  }
  if (batch_->full()) run_batch();
  if (!slot.job) return;  // that forward failed, and with it this request
  if (batch_->add_prompt_chunk(*slot.session, static_cast<size_t>(m_.prefill_chunk)) > 0)
    in_batch_.push_back(&slot);
}

void Scheduler::sample_and_emit(Slot& slot) {
  const GenRequest& r = slot.job->req;
  const tok::Tokenizer& tokenizer = *m_.tokenizer;
  Delta d;
  auto end_with = [&](const char* reason, bool flush) {
    if (flush) {
      std::string rest = slot.decoder->flush();
      std::string text = slot.stop->push(rest);
      if (!slot.stop->stopped()) text += slot.stop->flush();
      SplitText t = slot.think->push(text), t2 = slot.think->flush();
      d.content += t.content + t2.content;
      d.reasoning += t.reasoning + t2.reasoning;
    }
    if (!d.content.empty() || !d.reasoning.empty() || !d.logprobs.empty()) slot.job->push(std::move(d));
    slot.out.finish_reason = reason;
    finish(slot, slot.out);
  };
  if (r.max_tokens == 0) return end_with("length", false);
  const int32_t token = slot.sampler->sample(slot.logits);
  if (!r.ignore_eos && tokenizer.is_eog(token)) {
    ++slot.out.completion_tokens;
    counters_.generated_tokens.fetch_add(1);
    return end_with("stop", true);
  }
  if (r.logprobs) d.logprobs.push_back(logprob_of(slot.logits, token, r.top_logprobs));
  ++slot.out.completion_tokens;
  counters_.generated_tokens.fetch_add(1);
  const std::string text = slot.stop->push(slot.decoder->push(token));
  SplitText t = slot.think->push(text);
  d.content = std::move(t.content);
  d.reasoning = std::move(t.reasoning);
  if (slot.stop->stopped()) {
    SplitText rest = slot.think->flush();
    d.content += rest.content;
    d.reasoning += rest.reasoning;
    return end_with("stop", false);
  }
  if ((r.max_tokens > 0 && slot.out.completion_tokens >= r.max_tokens) || slot.session->context_full())
    return end_with("length", true);
  if (!d.content.empty() || !d.reasoning.empty() || !d.logprobs.empty()) slot.job->push(std::move(d));
  slot.logits = {};
  if (batch_->full()) run_batch();
  batch_->add_token(*slot.session, token);
  in_batch_.push_back(&slot);
}

void Scheduler::run_batch() { run_batch(*batch_, in_batch_); }

void Scheduler::run_batch(SessionBatch& batch, std::vector<Slot*>& in_batch) {
  if (in_batch.empty()) return;
  size_t decode_steps = 0;
  for (const Slot* slot : in_batch) decode_steps += !slot->prefilling;
  const size_t rows = batch.rows();
  const auto t0 = clock_type::now();
  try {
    batch.run();
  } catch (const std::exception& e) {
    // Every sequence the forward carried lost its state (SessionBatch reset them): each request fails.
    for (Slot* slot : in_batch) {
      Outcome o = slot->out;
      o.finish_reason.clear();
      o.error_status = 500;
      o.error = fmt::format("generation failed: {}", e.what());
      slot->prefilling = false;
      finish(*slot, o);
    }
    in_batch.clear();
    return;
  }
  const uint64_t ns = ns_since(t0);
  // The forward's time split between prompt and decode by their rows.
  const uint64_t decode_ns = rows ? ns * decode_steps / rows : 0;
  counters_.decode_ns.fetch_add(decode_ns);
  counters_.prompt_ns.fetch_add(ns - decode_ns);
  if (decode_steps > 0) {
    counters_.decode_forwards.fetch_add(1);
    counters_.decode_sequences.fetch_add(decode_steps);
    if (decode_steps < in_batch.size()) counters_.mixed_forwards.fetch_add(1);
  }
  for (Slot* slot : in_batch) {
    if (slot->prefilling) {
      if (slot->session->prefill_left() == 0) prompt_finished(*slot);
      continue;
    }
    slot->logits = slot->session->logits();
    // What the sequence waited for its token: the whole forward it shared.
    slot->out.predicted_ms += static_cast<double>(ns) * 1e-6;
  }
  in_batch.clear();
}

void Scheduler::step(Slot& slot) {
  if (slot.job->cancelled()) {
    counters_.cancelled.fetch_add(1);
    Outcome o = slot.out;
    o.finish_reason.clear();
    o.error_status = 499;
    o.error = "the client went away";
    return finish(slot, o);
  }
  try {
    if (!slot.started) start(slot);
    if (!slot.prefilling) sample_and_emit(slot);
  } catch (const std::exception& e) {
    slot.session->reset();  // a failed forward already reset it; anything else: start clean too
    Outcome o = slot.out;
    o.finish_reason.clear();
    o.error_status = 500;
    o.error = fmt::format("generation failed: {}", e.what());
    finish(slot, o);
  }
}

}  // namespace df::server
