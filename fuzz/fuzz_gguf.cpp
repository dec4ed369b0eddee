// libFuzzer target for the GGUF reader: any input must either parse or throw df::Error; a crash, a sanitizer
// report, an uncaught exception of another type or an out-of-memory is a bug.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = df::gguf::File::parse({data, size}, "fuzz.gguf");
    // Touch what a loader touches after parsing.
    for (const auto& t : f.tensors()) {
      if (t.nbytes <= 4096) {
        uint8_t buf[4096];
        f.read_tensor(t, buf);
      }
    }
    (void)f.architecture();
  } catch (const df::Error&) {
  }
  return 0;
}
