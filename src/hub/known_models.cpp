#include "hub/known_models.h"

#include <array>

#include "hub/names.h"

namespace df::hub {

namespace {

// The other architectures' reference files join this table once diskformer runs them at full size.
constexpr std::array kKnown = {
    KnownModel{"lfm2.5-24b", "LiquidAI/LFM2.5-24B-A2B-GGUF", "LFM2.5-24B-A2B-QAD-Q4_0.gguf",
               "f97fc8a443da86c71818adf91baecde5b7ef4c50",
               "89617cc4d3a52e973ee8dea72c7df04285f582107385796ba903f81e540e4afa", 13578190880ull,
               "LFM2.5 24B-A2B (Liquid AI), Q4_0: the seed's reference file"},
};

}  // namespace

std::span<const KnownModel> known_models() { return kKnown; }

const KnownModel* find_known_model(std::string_view alias) {
  const std::string lower = to_lower(alias);
  for (const KnownModel& k : kKnown)
    if (k.alias == lower) return &k;
  return nullptr;
}

}  // namespace df::hub
