#include "store_auth.h"

#include <cerrno>
#include <system_error>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

namespace dtrun::rdzv::detail {
namespace {

constexpr std::string_view kDomain = "dtrun-store-auth-v1";

}  // namespace

std::string randomNonce() {
  std::string nonce(kNonceBytes, '\0');
  std::size_t filled = 0;
  while (filled < nonce.size()) {
    const ssize_t n = ::getrandom(nonce.data() + filled, nonce.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(n);
  }
  return nonce;
}

std::string tokenProof(std::string_view token, std::string_view serverNonce,
                       std::string_view clientNonce) {
  std::string message;
  message.reserve(kDomain.size() + serverNonce.size() + clientNonce.size());
  message.append(kDomain).append(serverNonce).append(clientNonce);
  std::string mac(EVP_MAX_MD_SIZE, '\0');
  unsigned int length = 0;
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): OpenSSL takes unsigned bytes
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(mac.data()), &length);  // NOLINT
  mac.resize(length);
  return mac;
}

bool proofMatches(std::string_view proof, std::string_view token, std::string_view serverNonce,
                  std::string_view clientNonce) {
  const std::string expected = tokenProof(token, serverNonce, clientNonce);
  return proof.size() == expected.size() &&
         CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace dtrun::rdzv::detail
