// The store's token handshake, both sides: a fresh server nonce per connection and an
// HMAC-SHA256 proof over both nonces, so the token never crosses the wire and a recorded
// handshake cannot be replayed on another connection.
#pragma once

#include <string>
#include <string_view>

namespace dtrun::rdzv::detail {

constexpr std::size_t kNonceBytes = 32;

// kNonceBytes from the kernel's random source (getrandom); throws std::system_error if it fails.
std::string randomNonce();

// HMAC-SHA256(token, "dtrun-store-auth-v1" | serverNonce | clientNonce): what the client sends.
std::string tokenProof(std::string_view token, std::string_view serverNonce,
                       std::string_view clientNonce);

// Whether `proof` is tokenProof(token, ...), compared in constant time.
bool proofMatches(std::string_view proof, std::string_view token, std::string_view serverNonce,
                  std::string_view clientNonce);

}  // namespace dtrun::rdzv::detail
