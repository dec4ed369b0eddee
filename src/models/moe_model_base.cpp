#include "models/moe_model_base.h"

#include <algorithm>

#include "backend/backend_factory.h"
#include "models/weight_loader.h"

namespace df::models {

MoeModelBase::MoeModelBase(const LoadOptions& options)
    : prefetch_lookahead_(std::max(0, options.prefetch_lookahead)),
      backend_(options.backend ? options.backend
                               : backend::make_backend(backend::BackendOptions{"cpu", options.n_threads})) {}

void MoeModelBase::check_n_ctx(int n_ctx) const {
  if (n_ctx < 1) fail("{}: context size {} must be at least 1", info_.arch, n_ctx);
}

uint64_t MoeModelBase::state_bytes(int n_ctx, int n_batch) const {
  return models::state_bytes(state_dims_, n_ctx, n_batch, backend_->n_threads());
}

void MoeModelBase::finish_load(const gguf::File& file, const LoadOptions& options, WeightLoader& w,
                               ActRowBytes& act_row) {
  storage_ = w.take_storage();
  act_row.add(output_);
  act_row.add(expert_layout_);
  max_act_row_bytes_ = act_row.bytes();
  state_dims_.act_row_bytes = max_act_row_bytes_;
  experts_ = make_expert_provider(file, options, expert_layout_, *backend_);
}

}  // namespace df::models
