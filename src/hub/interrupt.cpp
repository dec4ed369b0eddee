#include "hub/interrupt.h"

#include <csignal>

namespace df::hub {

namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
struct sigaction g_previous {};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

}  // namespace

SigintFlag::SigintFlag() {
  g_interrupted.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, &g_previous);
}

SigintFlag::~SigintFlag() { sigaction(SIGINT, &g_previous, nullptr); }

const std::atomic<bool>* SigintFlag::flag() const { return &g_interrupted; }

}  // namespace df::hub
