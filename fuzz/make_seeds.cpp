// Writes a seed corpus for fuzz_gguf: a small valid file and the header regions of real files.
#include <fstream>
#include <string>

#include "../tests/gguf_bytes.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string dir = argv[1];
  auto good = df::testing::small_valid_gguf();
  std::ofstream(dir + "/small.gguf", std::ios::binary).write(reinterpret_cast<const char*>(good.data()),
                                                             static_cast<std::streamsize>(good.size()));
  for (int i = 2; i < argc; ++i) {  // truncated copies of the given files (their metadata and tensor tables)
    std::ifstream in(argv[i], std::ios::binary);
    std::string head(64 * 1024, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    std::ofstream(dir + "/seed" + std::to_string(i) + ".gguf", std::ios::binary) << head;
  }
  return 0;
}
