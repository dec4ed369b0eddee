#pragma once
// Error checks that look at what the message says: a throw of the right type is not enough, the message must
// name what is wrong (the file, the record, the flag, the limit). expect_error returns the message so that a
// test can compare two failures.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "util/error.h"

namespace df::testing {

// Runs fn, which must throw df::Error whose message contains every one of `parts`; returns the message.
inline std::string expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const df::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a " << typeid(e).name() << " instead of df::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "did not throw; expected an error mentioning '" << (parts.empty() ? "" : parts.front())
                << "'";
  return "";
}

}  // namespace df::testing
