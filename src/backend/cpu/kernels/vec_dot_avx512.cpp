// The AVX-512 level (compiled with AVX-512 F/BW/VL/DQ/VNNI; reached only when the CPU and OS support them):
// the x86 kernels with their u8 x s8 and int16 dot products in VNNI form and 32 vector registers.
#define DF_X86_LEVEL avx512
#include "backend/cpu/kernels/x86_table.h"

namespace df::kernels::detail {

const LevelTable& avx512_table() { return avx512::kTable; }

}  // namespace df::kernels::detail
