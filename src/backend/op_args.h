#pragma once
// Checks of op arguments that every backend makes alike (backend implementations only: it reads addresses).
#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/buffer_access.h"
#include "util/error.h"

namespace df::backend {

// norm_matmul_many's contract: every product reads the normed rows xn, n values a row.
inline void check_norm_matmul_tasks(Buf<const float> xn, int64_t n, std::span<const MatmulTask> tasks) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (BufferAccess::raw(tasks[i].x) != BufferAccess::raw(xn))
      fail("norm_matmul_many: product {} reads other rows than the normed ones", i);
    if (tasks[i].w.n_in != n)
      fail("norm_matmul_many: product {} takes rows of {} values, the normed rows have {}", i,
           tasks[i].w.n_in, n);
  }
}

}  // namespace df::backend
