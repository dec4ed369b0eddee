#include "experts/expert_provider.h"
#include "util/error.h"

namespace df::experts {

backend::Buf<const float> ExpertProvider::part_copy(size_t part, backend::Buf<const float>) {
  fail("expert provider: part_copy() for part {} of a provider whose experts are not spread over backends",
       part);
}

}  // namespace df::experts
