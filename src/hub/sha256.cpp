#include "hub/sha256.h"

#include <openssl/evp.h>

#include "util/error.h"

namespace df::hub {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) fail("sha256: out of memory");
  reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::reset() {
  if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) fail("sha256: OpenSSL could not start a digest");
}

void Sha256::update(const void* data, size_t n) {
  if (n > 0 && EVP_DigestUpdate(ctx_, data, n) != 1) fail("sha256: OpenSSL digest update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &len) != 1) fail("sha256: OpenSSL digest failed");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < len; ++i) {
    s.push_back(kDigits[md[i] >> 4]);
    s.push_back(kDigits[md[i] & 15]);
  }
  reset();
  return s;
}

}  // namespace df::hub
