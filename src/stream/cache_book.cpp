#include "stream/cache_book.h"

#include "stream/byte_size.h"
#include "util/error.h"

namespace df::stream {

CacheBook::CacheBook(const CacheBookOptions& o, CacheTelemetry& telemetry)
    : n_layers_(o.n_layers),
      n_expert_(o.n_expert),
      record_bytes_(o.record_bytes),
      telemetry_(telemetry),
      map_(static_cast<size_t>(o.n_layers) * static_cast<size_t>(o.n_expert), -1),
      slots_(o.n_slots),
      lists_(static_cast<int>(o.n_slots), kListCount),
      layer_done_epoch_(static_cast<size_t>(o.n_layers), 0) {
  const int n = static_cast<int>(o.n_slots);
  for (int s = 0; s < n; ++s) lists_.push_back(kFree, s);
  PolicyOptions po = o.policy_options;
  if (po.n_expert == 0) po.n_expert = o.n_expert;
  policy_ = make_policy(o.policy, n, static_cast<int>(map_.size()), po);
}

uint64_t CacheBook::memory_bytes() const {
  return map_.capacity() * sizeof(int32_t) + slots_.capacity() * sizeof(Slot) + lists_.memory_bytes() +
         policy_->memory_bytes() + layer_done_epoch_.capacity() * sizeof(uint64_t);
}

bool CacheBook::stale(const Slot& s) const {
  const int layer = s.key / n_expert_;
  return layer_done_epoch_[static_cast<size_t>(layer)] > s.guess_epoch;
}

void CacheBook::enter_layer(int layer) {
  if (layer == current_layer_) return;
  const int left = current_layer_;
  current_layer_ = layer;
  if (left < 0) return;
  layer_done_epoch_[static_cast<size_t>(left)] = ++epoch_;
  for (int s = lists_.front(kPendingGuesses); s != SlotLists::kNone;) {
    const int next = lists_.next(s);
    if (slots_[static_cast<size_t>(s)].key / n_expert_ == left) lists_.push_back(kStaleGuesses, s);
    s = next;
  }
  for (int s = lists_.front(kGuessQueue); s != SlotLists::kNone;) {
    const int next = lists_.next(s);
    if (slots_[static_cast<size_t>(s)].key / n_expert_ == left) {
      evict(s);
      lists_.push_back(kFree, s);
      ++telemetry_.layer(left).prefetch_cancelled;
    }
    s = next;
  }
}

void CacheBook::evict(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.key >= 0) map_[static_cast<size_t>(s.key)] = -1;
  if (s.key >= 0 && s.state == State::kReady && evict_listener_.fn)
    evict_listener_.fn(evict_listener_.ctx, s.key);
  policy_->remove_candidate(slot);
  lists_.remove(slot);
  s.key = -1;
  s.state = State::kEmpty;
  s.guessed = false;
}

void CacheBook::assign(int slot, int key, bool guess) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.key = key;
  s.state = State::kQueued;
  s.guessed = guess;
  s.guess_epoch = epoch_;
  map_[static_cast<size_t>(key)] = slot;
  lists_.push_back(guess ? kGuessQueue : kDemandQueue, slot);
  policy_->on_admit(slot, key);
}

// A guess for a layer still ahead is likely to be used within the millisecond, unlike the policy's victim, so
// it goes only after the policy has nothing left; a guess whose layer passed unused goes before anything
// else.
int CacheBook::demand_victim(int layer) {
  for (const List list : {kFree, kStaleGuesses}) {
    if (lists_.empty(list)) continue;
    const int s = lists_.pop_front(list);
    evict(s);
    return s;
  }
  if (const int s = policy_->victim(); s != EvictionPolicy::kNone) {
    evict(s);
    return s;
  }
  if (!lists_.empty(kPendingGuesses)) {
    const int s = lists_.pop_front(kPendingGuesses);
    evict(s);
    return s;
  }
  if (!lists_.empty(kGuessQueue)) {
    const int s = lists_.front(kGuessQueue);
    ++telemetry_.layer(slots_[static_cast<size_t>(s)].key / n_expert_).prefetch_cancelled;
    evict(s);
    return s;
  }
  // Only slots being read can still make room: a guess nobody pinned, once it lands, becomes a victim.
  for (const Slot& s : slots_)
    if (s.state == State::kReading && s.pins == 0) return kWaitForRead;
  fail(
      "expert cache: no slot for an expert of MoE layer {}: all {} slots ({}) are pinned by the experts in "
      "use; "
      "the budget is below what one step needs at once: raise --expert-cache",
      layer, slots_.size(), format_bytes(slots_.size() * record_bytes_));
}

namespace {

// Guesses for `target` made while demand is at `current` must not evict experts of the layers in between (nor
// of `target` itself): those are needed before the guess. LRU would offer exactly them, as the records of the
// next layer were used longest ago of all in a decode step. How far the policy looks for another victim:
constexpr int kGuessVictimScan = 64;

}  // namespace

int CacheBook::guess_victim(int layer) {
  for (const List list : {kFree, kStaleGuesses}) {
    if (lists_.empty(list)) continue;
    const int s = lists_.pop_front(list);
    evict(s);
    return s;
  }
  struct Ctx {
    const CacheBook* book;
    int current, span, n_layers;
  };
  const Ctx ctx{this, current_layer_,
                current_layer_ < 0 ? 0 : (layer - current_layer_ + n_layers_) % n_layers_, n_layers_};
  const SlotFilter allowed{&ctx, [](const void* p, int slot) {
                             const Ctx& c = *static_cast<const Ctx*>(p);
                             const int l = c.book->slots_[static_cast<size_t>(slot)].key / c.book->n_expert_;
                             const int ahead = (l - c.current + c.n_layers) % c.n_layers;
                             return ahead == 0 || ahead > c.span;
                           }};
  if (const int s = policy_->victim_if(allowed, kGuessVictimScan); s != EvictionPolicy::kNone) {
    evict(s);
    return s;
  }
  return -1;
}

int CacheBook::pin(int layer, int expert) {
  const int key = key_of(layer, expert);
  LayerCounters& c = telemetry_.layer(layer);
  int s = map_[static_cast<size_t>(key)];
  if (s >= 0 && slots_[static_cast<size_t>(s)].state == State::kFailed &&
      slots_[static_cast<size_t>(s)].pins == 0) {
    evict(s);  // a read that failed earlier is tried again
    lists_.push_back(kFree, s);
    s = -1;
  }
  if (s >= 0) {
    Slot& slot = slots_[static_cast<size_t>(s)];
    ++c.accesses;
    ++c.hits;
    if (slot.guessed) {
      slot.guessed = false;
      ++c.prefetch_hits;
      if (lists_.owner(s) == kGuessQueue)
        lists_.push_back(kDemandQueue, s);  // jumps ahead of the guesses
      else
        lists_.remove(s);
    }
    if (slot.pins++ == 0) policy_->remove_candidate(s);
    policy_->on_demand(key);
    return s;
  }
  const int victim = demand_victim(layer);
  if (victim == kWaitForRead) return kWaitForRead;
  ++c.accesses;
  ++c.misses;
  assign(victim, key, /*guess=*/false);
  slots_[static_cast<size_t>(victim)].pins = 1;
  policy_->on_demand(key);
  return victim;
}

bool CacheBook::prefetch(int layer, std::span<const int32_t> ids) {
  bool queued = false;
  LayerCounters& c = telemetry_.layer(layer);
  ++c.prefetch_rounds;
  for (int32_t id : ids) {
    const int key = key_of(layer, id);
    const int s = map_[static_cast<size_t>(key)];
    if (s >= 0) {
      Slot& slot = slots_[static_cast<size_t>(s)];
      if (slot.guessed) {  // guessed again: no longer a leftover of an older round
        slot.guess_epoch = epoch_;
        if (lists_.owner(s) == kStaleGuesses) lists_.push_back(kPendingGuesses, s);
      }
      continue;
    }
    const int victim = guess_victim(layer);
    if (victim < 0) {
      ++c.prefetch_dropped;
      continue;
    }
    assign(victim, key, /*guess=*/true);
    ++c.prefetch_issued;
    queued = true;
  }
  return queued;
}

bool CacheBook::insert_ready(int layer, int expert) {
  const int key = key_of(layer, expert);
  if (map_[static_cast<size_t>(key)] >= 0) return false;
  int victim = -1;
  for (const List list : {kFree, kStaleGuesses})
    if (victim < 0 && !lists_.empty(list)) victim = lists_.pop_front(list);
  if (victim < 0) victim = policy_->victim();
  if (victim < 0) return false;
  evict(victim);
  Slot& s = slots_[static_cast<size_t>(victim)];
  s.key = key;
  s.state = State::kReady;
  s.guessed = false;
  s.pins = 0;
  map_[static_cast<size_t>(key)] = victim;
  policy_->on_admit(victim, key);
  policy_->add_candidate(victim, key);
  return true;
}

void CacheBook::drop(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.pins > 0 || s.state != State::kReady) return;
  if (s.key >= 0) map_[static_cast<size_t>(s.key)] = -1;
  policy_->remove_candidate(slot);
  lists_.remove(slot);
  s.key = -1;
  s.state = State::kEmpty;
  s.guessed = false;
  lists_.push_back(kFree, slot);
}

void CacheBook::park(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.state == State::kFailed) {
    evict(slot);
    lists_.push_back(kFree, slot);
  } else if (s.guessed) {
    lists_.push_back(stale(s) ? kStaleGuesses : kPendingGuesses, slot);
  } else {
    policy_->add_candidate(slot, s.key);
  }
}

void CacheBook::unpin(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (--s.pins > 0) return;
  if (s.state == State::kReady || s.state == State::kFailed) park(slot);
  // A read still queued or in flight is parked when it lands.
}

void CacheBook::unpin_all() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].pins <= 0) continue;
    slots_[s].pins = 1;
    unpin(static_cast<int>(s));
  }
}

int CacheBook::start_read(bool allow_guess, bool* guess) {
  int s = lists_.pop_front(kDemandQueue);
  const bool is_guess = s == SlotLists::kNone && allow_guess;
  if (is_guess) s = lists_.pop_front(kGuessQueue);
  if (s == SlotLists::kNone) return -1;
  slots_[static_cast<size_t>(s)].state = State::kReading;
  if (guess) *guess = is_guess;
  return s;
}

void CacheBook::finish_read(int slot, bool ok) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.state = ok ? State::kReady : State::kFailed;
  if (s.pins == 0) park(slot);
}

}  // namespace df::stream
