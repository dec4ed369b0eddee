#pragma once
// Ctrl-C during a download: instead of killing the process, SIGINT sets a flag that the transfer polls, so
// the .part is flushed and kept for the next run. A second Ctrl-C kills as usual (SA_RESETHAND).
#include <atomic>

namespace df::hub {

class SigintFlag {
 public:
  SigintFlag();   // installs the handler and clears the flag
  ~SigintFlag();  // puts the previous handler back
  SigintFlag(const SigintFlag&) = delete;
  SigintFlag& operator=(const SigintFlag&) = delete;
  const std::atomic<bool>* flag() const;
};

}  // namespace df::hub
