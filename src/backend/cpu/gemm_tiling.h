#pragma once
// Internal to the CPU backend: how products are cut into pool tasks, and the pieces the matmul ops share.
//
// A task is a block of weight rows against a tile of activation rows (tokens). Tiles of up to 64 tokens
// let each weight block be loaded once for many tokens (the kernels' gemm keeps four weight rows in L1
// while the tile's activation rows pass); row blocks are sized so that every task of a job carries about
// the same work, a few tasks per thread. The split never changes results: the kernels compute each output
// with the same operations whatever the tile.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/backend.h"
#include "backend/buffer_access.h"
#include "backend/cpu/kernels/vec_dot.h"
#include "backend/cpu/thread_pool.h"
#include "util/error.h"

namespace df::backend::detail {

// The host address behind a view (the CPU backend's memory is host memory); null for an absent view.
template <class T>
T* raw(Buf<T> b) {
  return BufferAccess::raw(b);
}

inline constexpr int64_t kMaxTokenTile = 64;
// Below this many multiply-adds a task is not worth a claim (at tens of MACs per ns: about a microsecond).
inline constexpr int64_t kMinTaskMacs = int64_t{1} << 16;
// A weight block that several token tiles reuse is kept to this size, to stay in L2.
inline constexpr size_t kMaxBlockBytes = size_t{512} << 10;
// Quantizing fewer values than this stays on the calling thread.
inline constexpr int64_t kMinParallelQuantize = int64_t{1} << 15;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }

// The work each task of a job should carry: the job split in the pool's tasks per thread, but not
// below kMinTaskMacs, nor below the multiply-adds of kMinTaskBytes of weights where that is less (a single
// thread takes the whole job as few tasks as the tiles allow). The bytes bound matters for products that read
// many bytes per multiply-add, such as an F32 router against one token: a 64 x 2048 router is 2^17 MACs, two
// tasks by the MAC bound alone, yet half a megabyte to stream from memory.
inline constexpr int64_t kMinTaskBytes = int64_t{16} << 10;
inline int64_t task_macs(int64_t total_macs, const ThreadPool& pool, int64_t total_weight_bytes) {
  const int n_threads = pool.size();
  if (n_threads <= 1) return std::max<int64_t>(total_macs, 1);
  int64_t floor = kMinTaskMacs;
  if (total_weight_bytes > 0)
    floor = std::min(floor, std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(total_macs) *
                                                                      kMinTaskBytes / total_weight_bytes)));
  return std::max(floor, ceil_div(total_macs, int64_t{n_threads} * pool.tasks_per_thread()));
}

// One product cut into n_blocks × n_tiles tasks: blocks of weight rows against tiles of tokens
// [t * token_tile, ...). Task i is (i / n_tiles, i % n_tiles): the tasks of one weight block are claimed one
// after another, so the block comes from memory once and then from cache. The first n_big blocks are
// row_block rows long; a tapered product cuts its last rows into shorter blocks (small_block), so that the
// last tasks claimed are short: a job ends when its last task does, and with equal tasks the threads that
// finish first wait, on average, half a task for the others (measured: about a tenth of every decode
// product's time at 8-16 threads with four tasks per thread).
struct Tiling {
  int64_t n_out = 0, rows = 0;
  int64_t row_block = 0, n_blocks = 0;
  int64_t n_big = 0, small_block = 0;
  int64_t token_tile = 0, n_tiles = 0;

  int64_t tasks() const { return n_blocks * n_tiles; }
  int64_t row_begin(int64_t task) const {
    const int64_t b = task / n_tiles;
    return b < n_big ? b * row_block : n_big * row_block + (b - n_big) * small_block;
  }
  int64_t row_end(int64_t task) const {
    return std::min(n_out, row_begin(task) + (task / n_tiles < n_big ? row_block : small_block));
  }
  int64_t token_begin(int64_t task) const { return task % n_tiles * token_tile; }
  int64_t token_end(int64_t task) const { return std::min(rows, token_begin(task) + token_tile); }
};

// The share of a tapered product's rows that goes into short blocks, and how much shorter they are.
inline constexpr int64_t kTaperShareDenominator = 4;  // the last quarter of the rows
inline constexpr int64_t kTaperDivisor = 4;           // in blocks a quarter as long

// macs_per_row_token: the work of one weight row against one token (n_in, or 2 n_in when gate and up go
// together); block_row_bytes: the weight bytes of one row of the block (both matrices' when two go
// together). Row blocks are multiples of `align` (the kernels' 4-row tile, or an activation block size when
// the outputs are quantized per block), balanced across the product, and small enough to stay in L2 while
// a thread runs them against successive token tiles. `taper`: the product's tasks are the last of their
// job, so its last rows go in shorter blocks (only where there is one token tile: with several, the tiles
// already make short tasks).
inline Tiling tile_product(int64_t n_out, int64_t rows, int64_t macs_per_row_token, size_t block_row_bytes,
                           int64_t target_macs, int64_t align, bool taper = false) {
  Tiling t;
  t.n_out = n_out;
  t.rows = rows;
  if (n_out <= 0 || rows <= 0) return t;  // no tasks
  t.n_tiles = ceil_div(rows, kMaxTokenTile);
  t.token_tile = ceil_div(rows, t.n_tiles);
  const int64_t tile_macs = std::max<int64_t>(1, t.token_tile * macs_per_row_token);
  int64_t want_rows = std::max<int64_t>(1, target_macs / tile_macs);
  if (t.n_tiles > 1)
    want_rows =
        std::min(want_rows, static_cast<int64_t>(kMaxBlockBytes / std::max<size_t>(block_row_bytes, 1)));
  const int64_t n_blocks = std::max<int64_t>(
      1, std::min(ceil_div(n_out, std::max<int64_t>(want_rows, 1)), ceil_div(n_out, align)));
  t.row_block = round_up(ceil_div(n_out, n_blocks), align);
  t.n_blocks = ceil_div(n_out, t.row_block);
  t.n_big = t.n_blocks;
  t.small_block = t.row_block;
  const int64_t small = round_up(ceil_div(t.row_block, kTaperDivisor), align);
  if (taper && t.n_tiles == 1 && small < t.row_block && t.n_blocks > 1) {
    t.n_big = n_out * (kTaperShareDenominator - 1) / kTaperShareDenominator / t.row_block;
    t.small_block = small;
    t.n_blocks = t.n_big + ceil_div(n_out - t.n_big * t.row_block, small);
  }
  return t;
}

// The gemm that reads w's layout.
inline kernels::GemmFn gemm_of(const kernels::VecDotKernels& k, const Weight& w) {
  return w.packed() ? k.packed_gemm : k.gemm;
}

// Row blocks of a task start at multiples of this: the kernels' 4-row tile, or a whole packed group.
inline int64_t row_align(const Weight& w) { return w.packed() ? quant::kQ4_0x16Rows : 4; }

// Throws df::Error for a row length the kernels cannot take, or a packing that does not fit the weight.
inline void check_weight(const Weight& w) {
  kernels::check_row_length(w.type, w.n_in);
  if (w.packed() && w.packing != quant::preferred_packing(w.type, w.n_out))
    fail("cpu backend: a {} weight of {} rows cannot be {}-packed", ggml_type_name(w.type), w.n_out,
         quant::row_packing_name(w.packing));
}

// One SwiGLU output: ggml's scalar silu (x / (1 + e^-x)), then the product with up.
inline float silu_mul(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

}  // namespace df::backend::detail
