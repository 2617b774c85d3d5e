// EtcdClient against a real etcd (Debian's etcd-server, started by the test on loopback ports):
// keys, transactions, leases, watches, a member killed with -9, TLS and auth, good and bad.
#include <array>
#include <atomic>
#include <string>
#include <thread>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "dtrun/etcd.h"

#include "support/etcd_server.h"
#include "support/etcd_skip.h"
#include "support/loopback_listener.h"
#include "support/process.h"

using namespace std::chrono_literals;
using dtrun::Errc;
using dtrun::rdzv::EtcdClient;
using dtrun::rdzv::EtcdCompare;
using dtrun::rdzv::EtcdEvent;
using dtrun::rdzv::EtcdOp;
using dtrun::rdzv::EtcdOptions;
using dtrun::testing::EtcdCluster;
using dtrun::testing::EtcdClusterOptions;
using dtrun::testing::skipWithoutEtcd;

namespace {

std::unique_ptr<EtcdClient> connectTo(const EtcdOptions& options) {
  auto client = EtcdClient::connect(options);
  if (!client.isOk()) {
    FAIL(client.status().toString());
  }
  return std::move(client).value();
}

bool oneLine(const std::string& text) { return text.find('\n') == std::string::npos; }

// An HTTP server on a loopback port that answers every request "404 Not Found": what a killed
// member's port gives when another server took it.
class NotFoundServer {
 public:
  NotFoundServer() {
    fd_ = dtrun::testing::listenOnLoopback(endpoint_);
    thread_ = std::thread([this] { serve(); });
  }
  NotFoundServer(const NotFoundServer&) = delete;
  NotFoundServer& operator=(const NotFoundServer&) = delete;
  NotFoundServer(NotFoundServer&&) = delete;
  NotFoundServer& operator=(NotFoundServer&&) = delete;
  ~NotFoundServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }
  [[nodiscard]] int answered() const { return answered_.load(); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) {
        continue;
      }
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) {
        continue;
      }
      answer(conn);
      ::close(conn);
    }
  }
  // Reads the request's head and body (Content-Length), then answers 404 and closes.
  void answer(int conn) {
    std::string request;
    std::array<char, 4096> buffer{};
    for (;;) {
      const auto head = request.find("\r\n\r\n");
      if (head != std::string::npos) {
        const auto at = request.find("Content-Length: ");
        const std::size_t body = at == std::string::npos ? 0 : std::stoul(request.substr(at + 16));
        if (request.size() >= head + 4 + body) {
          break;
        }
      }
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 2000) != 1) {
        return;
      }
      const ssize_t n = ::read(conn, buffer.data(), buffer.size());
      if (n <= 0) {
        return;
      }
      request.append(buffer.data(), static_cast<std::size_t>(n));
    }
    const std::string reply =
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n"
        "Connection: close\r\n\r\nnot found";
    // Counted before the write: once the reply is out the client may move on and check the count
    // before this thread runs again.
    ++answered_;
    if (::write(conn, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) {
      --answered_;
    }
  }

  int fd_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("etcd client: put, get, erase and prefix ranges", "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd;
  auto client = connectTo(etcd.clientOptions());

  CHECK_FALSE(client->get("/t/a").value().has_value());
  const auto rev = client->put("/t/a", "1").value();
  CHECK(rev > 0);
  const std::string binary("\0\xff\x01 x", 5);
  REQUIRE(client->put("/t/b", binary).isOk());
  REQUIRE(client->put("/t/c", "").isOk());
  REQUIRE(client->put("/u/d", "other").isOk());
  const auto a = client->get("/t/a").value();
  REQUIRE(a.has_value());
  CHECK(a->value == "1");
  CHECK(a->createRevision == rev);
  CHECK(a->modRevision == rev);
  CHECK(a->version == 1);
  CHECK(client->get("/t/b").value()->value == binary);
  CHECK(client->get("/t/c").value()->value.empty());  // an empty value is not an absent key

  const auto all = client->getPrefix("/t/").value();
  REQUIRE(all.kvs.size() == 3);
  CHECK(all.kvs[0].key == "/t/a");
  CHECK(all.kvs[2].key == "/t/c");
  CHECK(all.count == 3);
  CHECK(all.revision >= rev + 3);
  const auto limited = client->getPrefix("/t/", 1, false, true).value();
  CHECK(limited.kvs.size() == 1);
  CHECK(limited.count == 3);
  CHECK(limited.kvs[0].value.empty());  // keys only

  // Sorted by create revision: the key written first comes first, whatever its name.
  REQUIRE(client->put("/q/z", "first").isOk());
  REQUIRE(client->put("/q/a", "second").isOk());
  const auto byAge = client->getPrefix("/q/", 0, true).value();
  REQUIRE(byAge.kvs.size() == 2);
  CHECK(byAge.kvs[0].value == "first");

  CHECK(client->erase("/t/a").value() == 1);
  CHECK(client->erase("/t/a").value() == 0);
  CHECK(client->erase("/t/", true).value() == 2);
  CHECK(client->getPrefix("/t/").value().kvs.empty());
  CHECK(client->get("/u/d").value()->value == "other");
  CHECK(client->endpoints() == etcd.endpoint(0));
}

TEST_CASE("etcd client: a transaction runs its success or its failure branch",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd;
  auto client = connectTo(etcd.clientOptions());
  const EtcdCompare absent{.key = "/k", .target = EtcdCompare::Target::kVersion, .number = 0};
  const EtcdOp create{.type = EtcdOp::Type::kPut, .key = "/k", .value = "v1"};
  const EtcdOp read{.type = EtcdOp::Type::kGet, .key = "/k"};

  auto first = client->txn({absent}, {create, read}, {read}).value();
  CHECK(first.succeeded);
  REQUIRE(first.gets.size() == 1);
  REQUIRE(first.gets[0].size() == 1);
  CHECK(first.gets[0][0].value == "v1");

  auto second = client->txn({absent}, {create}, {read}).value();
  CHECK_FALSE(second.succeeded);
  REQUIRE(second.gets.size() == 1);
  const auto mod = second.gets[0].at(0).modRevision;

  // A value compare and a mod-revision compare, both true.
  const EtcdCompare value{.key = "/k", .target = EtcdCompare::Target::kValue, .value = "v1"};
  const EtcdCompare sameMod{
      .key = "/k", .target = EtcdCompare::Target::kModRevision, .number = mod};
  const EtcdOp update{.type = EtcdOp::Type::kPut, .key = "/k", .value = "v2"};
  const auto third = client->txn({value, sameMod}, {update}, {}).value();
  CHECK(third.succeeded);
  CHECK(third.revision > mod);
  CHECK_FALSE(client->txn({sameMod}, {update}, {}).value().succeeded);  // the key moved on
  CHECK(client->get("/k").value()->value == "v2");

  // A prefix delete and a prefix read in one branch.
  REQUIRE(client->put("/p/1", "a").isOk());
  REQUIRE(client->put("/p/2", "b").isOk());
  const auto swept =
      client
          ->txn({},
                {EtcdOp{.type = EtcdOp::Type::kGet, .key = "/p/", .prefix = true},
                 EtcdOp{.type = EtcdOp::Type::kDelete, .key = "/p/", .prefix = true}},
                {})
          .value();
  CHECK(swept.succeeded);
  REQUIRE(swept.gets.size() == 1);
  CHECK(swept.gets[0].size() == 2);
  CHECK(client->getPrefix("/p/").value().count == 0);

  // etcd refuses more than --max-txn-ops (128) operations: one clear line.
  std::vector<EtcdOp> tooMany(129, EtcdOp{.type = EtcdOp::Type::kPut, .key = "/x", .value = "1"});
  const auto refused = client->txn({}, tooMany, {});
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.status().message(), Catch::Contains("too many operations"));
}

TEST_CASE("etcd client: keys of a lease vanish when it is revoked or expires",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd;
  // A request may retry for 30 s: an answer within half of that was not waited for.
  auto client = connectTo(etcd.clientOptions(30s));

  const auto revoked = client->grantLease(30s).value();
  CHECK(revoked != 0);
  REQUIRE(client->put("/alive/a", "1", revoked).isOk());
  CHECK(client->get("/alive/a").value()->lease == revoked);
  CHECK(client->keepAlive(revoked, std::chrono::seconds(5)).isOk());
  REQUIRE(client->revokeLease(revoked).isOk());
  CHECK_FALSE(client->get("/alive/a").value().has_value());
  CHECK(client->keepAlive(revoked, std::chrono::seconds(5)).code() == Errc::kNotFound);

  // Not kept alive: gone after its TTL (etcd checks expiry every 500 ms).
  const auto expiring = client->grantLease(1s).value();
  REQUIRE(client->put("/alive/b", "1", expiring).isOk());
  const auto start = std::chrono::steady_clock::now();
  CHECK(
      dtrun::testing::waitUntil([&] { return !client->get("/alive/b").value().has_value(); }, 10s));
  CHECK(std::chrono::steady_clock::now() - start >= 500ms);
  const auto late = client->keepAlive(expiring, std::chrono::seconds(5));
  CHECK(late.code() == Errc::kNotFound);
  CHECK_THAT(late.message(), Catch::Contains("expired"));
  // What an agent paused past its lease does next: etcd answers these with HTTP 404 and its own
  // error, an answer at once (not a member without etcd's API, waited for until read_timeout).
  const auto writeStart = std::chrono::steady_clock::now();
  const auto orphan = client->put("/alive/b", "2", expiring);
  CHECK(orphan.status().code() == Errc::kNotFound);
  CHECK_THAT(orphan.status().message(), Catch::Contains("lease not found"));
  CHECK_THAT(orphan.status().message(), Catch::Contains("lease_ttl"));
  CHECK(oneLine(orphan.status().message()));
  CHECK(client->revokeLease(expiring).isOk());  // gone already, as a revoke would leave it
  CHECK(std::chrono::steady_clock::now() - writeStart < 15s);

  // Kept alive: still there after several TTLs.
  const auto kept = client->grantLease(1s).value();
  REQUIRE(client->put("/alive/c", "1", kept).isOk());
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(400ms);
    REQUIRE(client->keepAlive(kept, std::chrono::seconds(5)).isOk());
  }
  CHECK(client->get("/alive/c").value().has_value());
}

TEST_CASE("etcd client: a watch returns events at or after its revision, or nothing in time",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd;
  auto client = connectTo(etcd.clientOptions());

  SECTION("a put made after the watch started wakes it") {
    std::thread writer([&] {
      std::this_thread::sleep_for(300ms);
      static_cast<void>(client->put("/w/key", "late"));
    });
    const auto start = std::chrono::steady_clock::now();
    const auto events = client->watch("/w/key", false, 0, 10s);
    writer.join();
    REQUIRE(events.isOk());
    REQUIRE(events.value().size() == 1);
    CHECK(events.value()[0].type == EtcdEvent::Type::kPut);
    CHECK(events.value()[0].kv.value == "late");
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }

  SECTION("from a past revision it replays what happened since, deletes included") {
    const auto first = client->put("/w/a", "1").value();
    REQUIRE(client->put("/w/b", "2").isOk());
    REQUIRE(client->erase("/w/a").isOk());
    const auto events = client->watch("/w/", true, first + 1, 5s).value();
    REQUIRE(events.size() == 2);
    CHECK(events[0].kv.key == "/w/b");
    CHECK(events[1].type == EtcdEvent::Type::kDelete);
    CHECK(events[1].kv.key == "/w/a");
    const auto everything = client->watch("/w/", true, first, 5s).value();
    CHECK(everything.size() == 3);
  }

  SECTION("nothing happens: empty at the timeout") {
    const auto start = std::chrono::steady_clock::now();
    const auto events = client->watch("/w/never", false, 0, 400ms);
    REQUIRE(events.isOk());
    CHECK(events.value().empty());
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 400ms);
    CHECK(took < 5s);
  }

  SECTION("cancel stops it within its check interval") {
    std::atomic<bool> cancel{false};
    std::thread canceller([&] {
      std::this_thread::sleep_for(300ms);
      cancel = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const auto events = client->watch("/w/never", false, 0, 30s, &cancel);
    canceller.join();
    CHECK(events.status().code() == Errc::kCancelled);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }

  SECTION("many threads share one client") {
    std::vector<std::thread> threads;
    threads.reserve(8);
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          const std::string key = "/w/t" + std::to_string(t) + "/" + std::to_string(i);
          if (!client->put(key, "v").isOk() || !client->get(key).isOk()) {
            ++failures;
          }
        }
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    CHECK(failures == 0);
    CHECK(client->getPrefix("/w/t").value().count == 400);
  }
}

TEST_CASE("etcd client: requests go on when a member of a 3-member cluster is killed with -9",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd(EtcdClusterOptions{.members = 3});
  // A write that member 0 (the first endpoint) had forwarded to itself as the leader when it
  // died is lost: its answer is etcd's "request timed out" after 5 s + 2 election timeouts,
  // then the client retries. The timeout leaves room for that.
  auto client = connectTo(etcd.clientOptions(20s));
  REQUIRE(client->put("/f/before", "1").isOk());

  // A watch open on member 0 when it dies goes on at another member and sees the put.
  std::atomic<bool> watching{false};
  dtrun::Result<std::vector<EtcdEvent>> seen = std::vector<EtcdEvent>{};
  const auto from = client->get("/f/before").value()->modRevision + 1;
  std::thread watcher([&] {
    watching = true;
    seen = client->watch("/f/after", false, from, 20s);
  });
  REQUIRE(dtrun::testing::waitUntil([&] { return watching.load(); }, 5s));
  std::this_thread::sleep_for(300ms);
  etcd.killMember(0);
  const auto start = std::chrono::steady_clock::now();
  const auto put = client->put("/f/after", "2");
  const auto failover = std::chrono::steady_clock::now() - start;
  watcher.join();
  INFO(put.status().toString());
  REQUIRE(put.isOk());
  INFO(seen.status().toString());
  REQUIRE(seen.isOk());
  REQUIRE(seen.value().size() == 1);
  CHECK(seen.value()[0].kv.value == "2");
  WARN("first request after kill -9 of member 0 took "
       << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count() << " ms");
  for (int i = 0; i < 20; ++i) {
    REQUIRE(client->put("/f/n" + std::to_string(i), "v").isOk());
  }
  CHECK(client->getPrefix("/f/").value().count == 22);
  const auto lease = client->grantLease(10s);
  REQUIRE(lease.isOk());
  CHECK(client->keepAlive(lease.value(), std::chrono::seconds(5)).isOk());
}

TEST_CASE(
    "etcd client: TLS with the right CA and client certificate works, a wrong one is one line",
    "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd(EtcdClusterOptions{.tls = true});

  SECTION("the right CA and client certificate") {
    auto client = connectTo(etcd.clientOptions());
    REQUIRE(client->put("/tls/k", "v").isOk());
    CHECK(client->get("/tls/k").value()->value == "v");
    CHECK(client->watch("/tls/k", false, 1, 5s).value().size() == 1);
  }

  SECTION("https:// in front of the endpoint is accepted") {
    auto options = etcd.clientOptions();
    options.endpoints = {"https://" + etcd.endpoint(0)};
    CHECK(EtcdClient::connect(options).isOk());
  }

  SECTION("a CA that did not sign etcd's certificate") {
    auto options = etcd.clientOptions(3s);
    options.caFile = etcd.wrongCaFile();
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    const auto message = client.status().message();
    CHECK(client.status().code() == Errc::kDenied);
    CHECK_THAT(message, Catch::Contains(etcd.endpoint(0)));
    CHECK_THAT(message, Catch::Contains("CA"));
    CHECK(oneLine(message));
  }

  SECTION("no client certificate where etcd requires one") {
    auto options = etcd.clientOptions(3s);
    options.certFile.clear();
    options.keyFile.clear();
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    CHECK(client.status().code() == Errc::kDenied);
    CHECK_THAT(client.status().message(), Catch::Contains("certificate"));
    CHECK_THAT(client.status().message(), Catch::Contains(etcd.endpoint(0)));
    CHECK(oneLine(client.status().message()));
  }

  SECTION("plain HTTP to a TLS endpoint") {
    auto options = etcd.clientOptions(3s);
    options.caFile.clear();
    options.certFile.clear();
    options.keyFile.clear();
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    CHECK_THAT(client.status().message(), Catch::Contains(etcd.endpoint(0)));
    CHECK(oneLine(client.status().message()));
  }

  SECTION("a CA file that does not exist") {
    auto options = etcd.clientOptions(3s);
    options.caFile = "/nonexistent/ca.pem";
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    CHECK(client.status().code() == Errc::kInvalidArgument);
    CHECK_THAT(client.status().message(), Catch::Contains("/nonexistent/ca.pem"));
    CHECK_THAT(client.status().message(), Catch::Contains("No such file"));
  }
}

TEST_CASE("etcd client: user/password auth, a wrong password is one line and kDenied",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  EtcdCluster etcd(EtcdClusterOptions{.auth = true});

  SECTION("the right password") {
    auto client = connectTo(etcd.clientOptions());
    REQUIRE(client->put("/auth/k", "v").isOk());
    CHECK(client->get("/auth/k").value()->value == "v");
    CHECK(client->watch("/auth/k", false, 1, 5s).value().size() == 1);
    const auto lease = client->grantLease(5s).value();
    CHECK(client->keepAlive(lease, std::chrono::seconds(5)).isOk());
  }

  SECTION("a token etcd forgot is renewed, for watches and keep-alives too") {
    // Not part of the cluster above: this one forgets tokens unused for a second.
    EtcdCluster forgetful(EtcdClusterOptions{.auth = true, .authTokenTtlSeconds = 1});
    auto client = connectTo(forgetful.clientOptions());
    const auto lease = client->grantLease(30s).value();
    REQUIRE(client->put("/auth/w", "1").isOk());
    std::this_thread::sleep_for(2500ms);  // the token expires (etcd checks every second)
    const auto events = client->watch("/auth/w", false, 1, 5s);
    INFO(events.status().toString());
    CHECK(events.isOk());
    std::this_thread::sleep_for(2500ms);
    const auto kept = client->keepAlive(lease, std::chrono::seconds(5));
    INFO(kept.toString());
    CHECK(kept.isOk());
    std::this_thread::sleep_for(2500ms);
    CHECK(client->get("/auth/w").isOk());
  }

  SECTION("a wrong password") {
    auto options = etcd.clientOptions(3s);
    options.password = "wrong";
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    CHECK(client.status().code() == Errc::kDenied);
    CHECK_THAT(client.status().message(),
               Catch::Contains("authentication failed for user 'dtrun'"));
    CHECK_THAT(client.status().message(), Catch::Contains(etcd.endpoint(0)));
    CHECK_THAT(client.status().message(), Catch::Contains("--rdzv_conf"));
    CHECK(oneLine(client.status().message()));
  }

  SECTION("no user where etcd requires one") {
    auto options = etcd.clientOptions(3s);
    options.user.clear();
    options.password.clear();
    const auto client = EtcdClient::connect(options);
    REQUIRE_FALSE(client.isOk());
    CHECK(client.status().code() == Errc::kDenied);
    CHECK_THAT(client.status().message(), Catch::Contains("user"));
  }
}

TEST_CASE("etcd client: an endpoint answering HTTP 404 is passed over while another serves etcd",
          "[integration][rdzv][etcd]") {
  if (skipWithoutEtcd()) {
    return;
  }
  NotFoundServer other;
  EtcdCluster etcd;
  EtcdOptions options = etcd.clientOptions(10s);
  options.endpoints.insert(options.endpoints.begin(), other.endpoint());
  auto client = connectTo(options);  // the first endpoint tried answers 404
  CHECK(other.answered() >= 1);
  REQUIRE(client->put("/nf/a", "1").isOk());
  CHECK(client->get("/nf/a").value()->value == "1");

  SECTION("only 404s: refused at once, naming the endpoint") {
    EtcdOptions wrong;
    wrong.endpoints = {other.endpoint()};
    wrong.timeout = 10s;
    const auto start = std::chrono::steady_clock::now();
    const auto refused = EtcdClient::connect(wrong);
    REQUIRE_FALSE(refused.isOk());
    CHECK(refused.status().code() == Errc::kProtocol);
    CHECK_THAT(refused.status().message(), Catch::Contains(other.endpoint()));
    CHECK_THAT(refused.status().message(), Catch::Contains("404"));
    CHECK(oneLine(refused.status().message()));
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
}

TEST_CASE("etcd client: unreachable endpoints fail within the timeout, naming them",
          "[integration][rdzv][etcd]") {
  // No etcd needed: nothing listens on these ports.
  EtcdOptions options;
  const auto a = "127.0.0.1:" + std::to_string(dtrun::testing::freeLoopbackPort());
  const auto b = "127.0.0.1:" + std::to_string(dtrun::testing::freeLoopbackPort());
  options.endpoints = {a, b};
  options.timeout = 1s;
  const auto start = std::chrono::steady_clock::now();
  const auto client = EtcdClient::connect(options);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(client.isOk());
  CHECK(client.status().code() == Errc::kConnection);
  CHECK_THAT(client.status().message(), Catch::Contains(a));
  CHECK_THAT(client.status().message(), Catch::Contains(b));
  CHECK_THAT(client.status().message(), Catch::Contains("refused"));
  CHECK(oneLine(client.status().message()));
  CHECK(took >= 900ms);
  CHECK(took < 5s);

  SECTION("bad options are refused before any connection") {
    EtcdOptions bad;
    CHECK(EtcdClient::connect(bad).status().code() == Errc::kInvalidArgument);
    bad.endpoints = {a};
    bad.caFile = "/nonexistent/ca.pem";
    CHECK(EtcdClient::connect(bad).status().code() == Errc::kInvalidArgument);
  }
}
