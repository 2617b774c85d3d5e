// The store's token: dtrun clients prove it by challenge-response; clients that cannot (PyTorch's)
// are served only from the store's own host or from a host where a client proved it. Other hosts
// are played by loopback source addresses (127.0.0.x), which the store sees as distinct peers.
#include <string>

#include <catch2/catch.hpp>

#include "protocol.h"
#include "rendezvous/raw_client.h"
#include "store_auth.h"
#include "support/test_support.h"

using namespace std::chrono_literals;
using dtrun::Errc;
using dtrun::rdzv::detail::Dialect;
using dtrun::rdzv::detail::encodeRequest;
using dtrun::rdzv::detail::Op;
using dtrun::rdzv::detail::Request;
using dtrun::testing::RawClient;

namespace {

constexpr const char* kToken = "s3cret-token";

std::unique_ptr<dtrun::rdzv::StoreServer> startWithToken() {
  dtrun::rdzv::ServerOptions options;
  options.token = kToken;
  return dtrun::testing::startServer(options);
}

dtrun::Result<std::unique_ptr<dtrun::rdzv::Store>> connectWith(std::uint16_t port,
                                                               const std::string& token) {
  dtrun::rdzv::ClientOptions options;
  options.port = port;
  options.timeout = 5s;
  options.token = token;
  return dtrun::rdzv::connectStore(options);
}

std::string encode(Dialect dialect, const Request& request) {
  std::string out;
  REQUIRE(encodeRequest(dialect, request, out));
  return out;
}

// SET then GET of `key` in `dialect`; true if the client was served (the GET echoes the value).
bool served(RawClient& client, Dialect dialect, const std::string& key) {
  client.send(encode(dialect, Request{.op = Op::kSet, .key = key, .value = "v"}));
  client.send(encode(dialect, Request{.op = Op::kGet, .key = key}));
  const std::string reply = client.recv(9);  // u64 length 1 + "v"
  return reply.size() == 9 && reply.back() == 'v';
}

// VALIDATE, then AUTH_CHALLENGE with `clientNonce`; returns the store's nonce ("" if none came).
std::string challenge(RawClient& client, const std::string& clientNonce) {
  client.send(encode(Dialect::kV2,
                     Request{.op = Op::kValidate, .word = dtrun::rdzv::detail::kValidationMagic}));
  client.send(encode(Dialect::kV2, Request{.op = Op::kAuthChallenge, .proof = clientNonce}));
  const std::string length = client.recv(8);
  if (length.size() != 8) {
    return {};
  }
  return client.recv(dtrun::rdzv::detail::loadU64(length.data()));
}

}  // namespace

TEST_CASE("a client with the store's token is served, a wrong token fails at once, clearly",
          "[integration][rdzv][auth]") {
  auto server = startWithToken();
  auto good = connectWith(server->port(), kToken);
  REQUIRE(good.isOk());
  REQUIRE(good.value()->set("k", "v").isOk());
  CHECK(good.value()->get("k").value() == "v");

  const auto start = std::chrono::steady_clock::now();
  auto bad = connectWith(server->port(), "not-the-token");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == Errc::kDenied);
  CHECK_THAT(bad.status().message(),
             Catch::Contains("refused our token") && Catch::Contains("DTRUN_STORE_TOKEN"));
  CHECK(std::chrono::steady_clock::now() - start < 4s);  // refused, not retried until the deadline
}

TEST_CASE("a store without a token tells a client that brings one", "[integration][rdzv][auth]") {
  auto server = dtrun::testing::startServer();
  auto client = connectWith(server->port(), kToken);
  REQUIRE_FALSE(client.isOk());
  CHECK_THAT(client.status().message(), Catch::Contains("token handshake"));
}

TEST_CASE("clients without the token are refused from a host that has not proved it",
          "[integration][rdzv][auth]") {
  auto server = startWithToken();
  {
    RawClient torch(server->port(), 2000, "127.0.0.6");  // a PyTorch (legacy) client
    CHECK_FALSE(served(torch, Dialect::kLegacy, "a"));
  }
  {
    RawClient v2(server->port(), 2000, "127.0.0.6");  // torch >= 2.2, or dtrun without a token
    v2.send(encode(Dialect::kV2,
                   Request{.op = Op::kValidate, .word = dtrun::rdzv::detail::kValidationMagic}));
    CHECK_FALSE(served(v2, Dialect::kV2, "b"));
  }
  // The store's own host is a host of the job: its workers' PyTorch clients are served.
  RawClient local(server->port(), 2000, "127.0.0.1");
  CHECK(served(local, Dialect::kLegacy, "c"));
}

TEST_CASE("a host that proved the token gets its PyTorch clients served, a replay is refused",
          "[integration][rdzv][auth]") {
  auto server = startWithToken();
  const std::string clientNonce(32, 'n');
  std::string capturedProof;
  {
    RawClient agent(server->port(), 2000, "127.0.0.4");  // an agent proves the token
    const std::string serverNonce = challenge(agent, clientNonce);
    REQUIRE(serverNonce.size() == dtrun::rdzv::detail::kNonceBytes);
    capturedProof = dtrun::rdzv::detail::tokenProof(kToken, serverNonce, clientNonce);
    agent.send(encode(Dialect::kV2, Request{.op = Op::kAuthProof, .proof = capturedProof}));
    CHECK(agent.recv(1) == std::string(1, dtrun::rdzv::detail::kAuthAccepted));
    CHECK(served(agent, Dialect::kV2, "agent"));
  }
  RawClient torchOnJobHost(server->port(), 2000, "127.0.0.4");
  CHECK(served(torchOnJobHost, Dialect::kLegacy, "worker"));

  // The same challenge and proof bytes on a new connection from elsewhere: the store's nonce is
  // new, so the old proof does not match.
  RawClient replay(server->port(), 2000, "127.0.0.5");
  const std::string freshNonce = challenge(replay, clientNonce);
  REQUIRE(freshNonce.size() == dtrun::rdzv::detail::kNonceBytes);
  replay.send(encode(Dialect::kV2, Request{.op = Op::kAuthProof, .proof = capturedProof}));
  CHECK(replay.recv(1) == std::string(1, dtrun::rdzv::detail::kAuthRefused));
  CHECK(replay.recv(1).empty());  // and closed
  RawClient torchElsewhere(server->port(), 2000, "127.0.0.5");
  CHECK_FALSE(served(torchElsewhere, Dialect::kLegacy, "stranger"));
}

TEST_CASE("the handshake's MAC depends on the token and on both nonces", "[rdzv][auth]") {
  using dtrun::rdzv::detail::proofMatches;
  using dtrun::rdzv::detail::tokenProof;
  const std::string a(32, 'a');
  const std::string b(32, 'b');
  const std::string proof = tokenProof("t", a, b);
  CHECK(proof.size() == 32);
  CHECK(proofMatches(proof, "t", a, b));
  CHECK_FALSE(proofMatches(proof, "u", a, b));
  CHECK_FALSE(proofMatches(proof, "t", b, a));
  CHECK_FALSE(proofMatches(proof.substr(0, 31), "t", a, b));
  CHECK(dtrun::rdzv::detail::randomNonce() != dtrun::rdzv::detail::randomNonce());
}
