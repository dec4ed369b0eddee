// HugePageBuffer: zeroed, writable, 2 MiB-aligned when at least one huge page long, exactly as long as asked
// (rounded to pages), moved without copying, released on destruction.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "util/error.h"
#include "util/huge_page_buffer.h"

namespace df {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

TEST(HugePageBuffer, LargeBuffersAreHugePageAlignedZeroedAndWritable) {
  for (size_t bytes : {kHuge, 3 * kHuge + 12345, 17 * kHuge}) {
    HugePageBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHuge, 0u) << bytes;
    for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(b.data()[i], 0) << i;
    EXPECT_EQ(b.data()[bytes - 1], 0);
    std::memset(b.data(), 0xAB, bytes);  // every byte is ours
    EXPECT_EQ(b.data()[bytes - 1], 0xAB);
  }
}

TEST(HugePageBuffer, SmallAndEmptyBuffers) {
  HugePageBuffer small(100);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(small.size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 4096, 0u);
  small.data()[99] = 1;
  HugePageBuffer none(0);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.data(), nullptr);
}

TEST(HugePageBuffer, MovesHandOverTheMemory) {
  HugePageBuffer a(kHuge + 1);
  uint8_t* p = a.data();
  p[7] = 42;
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[7], 42);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.size(), 0u);
  HugePageBuffer c(10);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), kHuge + 1);
}

TEST(HugePageBuffer, AnImpossibleSizeIsAClearError) {
  try {
    HugePageBuffer b(size_t{1} << 62, "test weights");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test weights"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace df
