#pragma once
// The errors the HTTP API answers with, in OpenAI's shape: {"error": {"message", "type", "code"}} with the
// HTTP status as the code. A handler throws ApiError; the server turns it into the response.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace df::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

template <typename... Args>
[[noreturn]] void bad_request(fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, fmt::format(f, std::forward<Args>(args)...));
}

// OpenAI's error type for an HTTP status ("invalid_request_error" for 400, ...).
const char* error_type(int status);
nlohmann::json error_body(int status, const std::string& message);

}  // namespace df::server
