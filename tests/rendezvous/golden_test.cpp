// Byte-exact replays: real torch 1.13 traffic recorded against torch's own TCPStore server
// (tests/rendezvous/golden/*-torch.jsonl, one JSON object per chunk in the order a logging proxy
// saw them) is sent to our server, which must answer with exactly the bytes torch's server did.
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/raw_client.h"
#include "support/test_support.h"

using dtrun::testing::hex;
using dtrun::testing::RawClient;
using dtrun::testing::unhex;

namespace {

void replay(const std::string& name) {
  auto server = dtrun::testing::startServer();
  std::ifstream file(std::string(DTRUN_SOURCE_DIR) + "/tests/rendezvous/golden/" + name);
  REQUIRE(file.good());
  std::map<int, std::unique_ptr<RawClient>> conns;
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(file, line);) {
    events.push_back(nlohmann::json::parse(line));
  }
  int replies = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& event = events[i];
    const int conn = event.at("conn").get<int>();
    if (event.contains("event")) {
      if (event.at("event") == "open") {
        conns[conn] = std::make_unique<RawClient>(server->port());
      }
      continue;
    }
    const std::string bytes = unhex(event.at("hex").get<std::string>());
    REQUIRE(conns.count(conn) == 1);
    if (event.at("dir") == "c2s") {
      conns[conn]->send(bytes);
      // Requests of two connections sent back to back race inside the server (two ranks'
      // concurrent ADDs); the recording holds one order, so let this one arrive first.
      if (i + 1 < events.size() && events[i + 1].contains("dir") &&
          events[i + 1].at("dir") == "c2s" && events[i + 1].at("conn").get<int>() != conn) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } else {
      INFO(name << " conn " << conn << " reply #" << replies);
      CHECK(hex(conns[conn]->recv(bytes.size())) == hex(bytes));
      ++replies;
    }
  }
  CHECK(replies > 0);
}

}  // namespace

TEST_CASE("torch 1.13 client traffic gets torch's replies byte for byte",
          "[integration][rdzv][golden]") {
  // ops: set/get/add/wait/compare_set/num_keys/delete, a late wait and 1.13's timed-out wait.
  // check: CHECK and WATCH_KEY with its KEY_UPDATED and KEY_DELETED events.
  // gloo: a 2-rank gloo init_process_group with the agent store.
  const auto name =
      GENERATE(as<std::string>{}, "ops-torch.jsonl", "check-torch.jsonl", "gloo-torch.jsonl");
  replay(name);
}

namespace {

// Builds wire bytes independently of the product's encoder: opcode byte, u64 LE lengths.
struct Wire {
  std::string bytes;
  Wire& op(int code) {
    bytes.push_back(static_cast<char>(code));
    return *this;
  }
  Wire& u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xffU));
    }
    return *this;
  }
  Wire& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xffU));
    }
    return *this;
  }
  Wire& str(std::string_view s) {
    u64(s.size());
    bytes.append(s);
    return *this;
  }
};

}  // namespace

TEST_CASE("a torch >= 2.2 conversation gets the replies upstream's server gives",
          "[integration][rdzv][golden]") {
  // Opcodes and layouts from upstream's TCPStoreBackend.hpp; the opening bytes are the ones
  // upstream's TestClientProtocol asserts (VALIDATE 00 ce f7 85 3c, then PING with a nonce).
  auto server = dtrun::testing::startServer();
  RawClient a(server->port());
  RawClient b(server->port());
  const auto expect = [](RawClient& c, const Wire& reply) {
    CHECK(hex(c.recv(reply.bytes.size())) == hex(reply.bytes));
  };
  for (RawClient* c : {&a, &b}) {
    c->send(Wire{}.op(0).u32(0x3C85F7CE).op(13).u32(0x12345678).bytes);
    expect(*c, Wire{}.u32(0x12345678));
  }
  a.send(Wire{}.op(4).str("init/").u64(1).bytes);  // ADD
  expect(a, Wire{}.u64(1));
  a.send(Wire{}.op(1).str("/x").str("hello").bytes);  // SET: no reply
  a.send(Wire{}.op(3).str("/x").bytes);               // GET
  expect(a, Wire{}.str("hello"));
  a.send(Wire{}.op(3).str("/missing").bytes);  // GET missing: empty
  expect(a, Wire{}.str(""));
  a.send(Wire{}.op(2).str("/x").str("hello").str("bye").bytes);  // COMPARE_SET
  expect(a, Wire{}.str("bye"));
  a.send(Wire{}.op(9).str("/x").str("!").bytes);                               // APPEND
  a.send(Wire{}.op(11).u64(2).str("/m1").str("1").str("/m2").str("2").bytes);  // MULTI_SET
  a.send(Wire{}.op(10).u64(2).str("/x").str("/m2").bytes);                     // MULTI_GET
  expect(a, Wire{}.str("bye!").str("2"));
  a.send(Wire{}.op(5).u64(2).str("/x").str("/nope").bytes);  // CHECK: NOT_READY
  expect(a, Wire{}.op(1));
  a.send(Wire{}.op(6).u64(1).str("/late").bytes);  // WAIT, pending
  b.send(Wire{}.op(1).str("/late").str("1").bytes);
  expect(a, Wire{}.op(0));  // STOP_WAITING
  a.send(Wire{}.op(6).u64(1).str("/never").bytes);
  a.send(Wire{}.op(12).bytes);                        // CANCEL_WAIT
  expect(a, Wire{}.op(1));                            // WAIT_CANCELED only
  a.send(Wire{}.op(14).str("/q").str("item").bytes);  // QUEUE_PUSH
  a.send(Wire{}.op(16).str("/q").bytes);              // QUEUE_LEN
  expect(a, Wire{}.u64(1));
  a.send(Wire{}.op(15).str("/q").bytes);  // QUEUE_POP
  expect(a, Wire{}.u64(1).str("item"));
  a.send(Wire{}.op(15).str("/q").bytes);
  expect(a, Wire{}.u64(0));
  a.send(Wire{}.op(8).str("/m1").bytes);  // DELETE_KEY
  expect(a, Wire{}.u64(1));
  a.send(Wire{}.op(7).bytes);   // GETNUMKEYS
  expect(a, Wire{}.u64(4));     // init/ /x /m2 /late
  a.send(Wire{}.op(17).bytes);  // LIST_KEYS, any order
  CHECK(hex(a.recv(8)) == hex(Wire{}.u64(4).bytes));
  std::set<std::string> listed;
  for (int i = 0; i < 4; ++i) {
    const auto length = a.recv(8);
    REQUIRE(length.size() == 8);
    listed.insert(a.recv(static_cast<unsigned char>(length[0])));
  }
  CHECK(listed == std::set<std::string>{"init/", "/x", "/m2", "/late"});
  a.send(Wire{}.op(18).str("/bar").u64(2).bytes);  // BARRIER, pending
  b.send(Wire{}.op(18).str("/bar").u64(2).bytes);
  expect(b, Wire{}.op(0));
  expect(a, Wire{}.op(0));

  // The same key space serves a torch 1.13 (legacy dialect) connection.
  RawClient legacy(server->port());
  legacy.send(Wire{}.op(2).str("/x").bytes);  // legacy GET
  expect(legacy, Wire{}.str("bye!"));

  // A wrong magic, first or later, closes only that connection.
  RawClient wrong(server->port());
  wrong.send(Wire{}.op(0).u32(0xDEADBEEF).bytes);
  CHECK(wrong.closedByPeer());
  a.send(Wire{}.op(0).u32(0xDEADBEEF).bytes);
  CHECK(a.closedByPeer());
  b.send(Wire{}.op(13).u32(7).bytes);
  expect(b, Wire{}.u32(7));
}
