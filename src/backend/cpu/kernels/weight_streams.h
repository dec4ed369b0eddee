#pragma once
// How the packed Q4_0x16 kernel walks its weights on this CPU, for one activation row (decode), where a
// thread's bandwidth from DRAM sets the speed. The right walk depends on the hardware prefetchers, which
// differ between vendors (docs/PERF.md, issue 18): on the H200 host's Xeon, a thread reading one sequential
// stream got ~5 GB/s at 8-16 threads, and software hints ahead of the stream raised decode by up to a
// quarter; on the dev VM's Zen 4 the same hints cost 5-10 % at one thread, and two streams a thread cost
// more.
namespace df::kernels {

struct WeightStreams {
  int streams = 1;         // groups a thread reads side by side (1 or 2)
  int prefetch_bytes = 0;  // how far ahead of the block being read its bytes are asked into L2 (0: no hints)
};

// The defaults for this CPU's vendor, unless DF_Q4_0X16_STREAMS (1 or 2) or DF_Q4_0X16_PREFETCH (bytes,
// 0 to 1 MiB) say otherwise; read once. Throws df::Error for a malformed value.
const WeightStreams& weight_streams();

}  // namespace df::kernels
