#pragma once
// An incremental sha256 (OpenSSL EVP), fed as a download's bytes arrive so that the file is never read twice.
#include <cstddef>
#include <string>

struct evp_md_ctx_st;

namespace df::hub {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void reset();
  void update(const void* data, size_t n);
  std::string hex();  // lowercase; the hash is reset afterwards

 private:
  evp_md_ctx_st* ctx_;
};

}  // namespace df::hub
