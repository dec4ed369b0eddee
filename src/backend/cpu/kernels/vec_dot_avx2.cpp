// The AVX2 level (compiled with -mavx2 -mfma -mf16c; reached only when the CPU and OS support them).
#define DF_X86_LEVEL avx2
#include "backend/cpu/kernels/x86_table.h"

namespace df::kernels::detail {

const LevelTable& avx2_table() { return avx2::kTable; }

}  // namespace df::kernels::detail
