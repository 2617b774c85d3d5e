#include "protocol.h"

#include <catch2/catch.hpp>

#include "rendezvous/raw_client.h"

using namespace dtrun::rdzv::detail;
using dtrun::testing::hex;
using dtrun::testing::unhex;

namespace {

Request sampleRequest(Op op) {
  Request r;
  r.op = op;
  r.key = "/key";
  r.value = "value";
  r.desired = "desired";
  r.integer = -2;
  r.word = 0x3C85F7CE;
  r.keys = {"/a", "/bb"};
  r.values = {"1", "22"};
  return r;
}

}  // namespace

TEST_CASE("every operation round-trips through encode and parse in each dialect", "[unit][rdzv]") {
  for (const auto dialect : {Dialect::kLegacy, Dialect::kV2}) {
    for (int i = 0; i <= static_cast<int>(Op::kWaitGet); ++i) {
      const auto op = static_cast<Op>(i);
      const Request in = sampleRequest(op);
      std::string wire;
      if (!encodeRequest(dialect, in, wire)) {
        CHECK_FALSE(wireFromOp(dialect, op).has_value());
        continue;
      }
      INFO(opName(op) << (dialect == Dialect::kV2 ? " v2" : " legacy"));
      Request out;
      const auto outcome = parseRequest(dialect, wire, Limits{}, out);
      REQUIRE(outcome.status == ParseStatus::kComplete);
      CHECK(outcome.consumed == wire.size());
      CHECK(out.op == op);
      std::string again;
      REQUIRE(encodeRequest(dialect, out, again));
      CHECK(hex(again) == hex(wire));

      // Every strict prefix is incomplete, never an error: fragmentation is always accepted.
      for (std::size_t cut = 0; cut < wire.size(); ++cut) {
        const auto partial =
            parseRequest(dialect, std::string_view(wire).substr(0, cut), Limits{}, out);
        REQUIRE(partial.status == ParseStatus::kNeedMore);
        CHECK(partial.needed > cut);
      }
    }
  }
}

TEST_CASE("encodings match the bytes torch 1.13 sends", "[unit][rdzv][golden]") {
  // From a real torch 1.13 client (tests/rendezvous/golden/ops-torch.jsonl).
  Request add;
  add.op = Op::kAdd;
  add.key = "init/";
  add.integer = 1;
  std::string wire;
  REQUIRE(encodeRequest(Dialect::kLegacy, add, wire));
  CHECK(hex(wire) == "030500000000000000696e69742f0100000000000000");

  Request cas;
  cas.op = Op::kCompareSet;
  cas.key = "/cas";
  cas.value = "";
  cas.desired = "v1";
  wire.clear();
  REQUIRE(encodeRequest(Dialect::kLegacy, cas, wire));
  CHECK(hex(wire) == "0104000000000000002f636173000000000000000002000000000000007631");
}

TEST_CASE("the newer dialect numbers operations as torch >= 2.2 does", "[unit][rdzv][golden]") {
  // Upstream TestClientProtocol: the connection opens with VALIDATE 0x3C85F7CE, then PING.
  Request validate;
  validate.op = Op::kValidate;
  validate.word = kValidationMagic;
  std::string wire;
  REQUIRE(encodeRequest(Dialect::kV2, validate, wire));
  CHECK(hex(wire) == "00cef7853c");
  const std::pair<Op, int> expected[] = {
      {Op::kSet, 1},       {Op::kCompareSet, 2}, {Op::kGet, 3},       {Op::kAdd, 4},
      {Op::kCheck, 5},     {Op::kWait, 6},       {Op::kNumKeys, 7},   {Op::kDeleteKey, 8},
      {Op::kAppend, 9},    {Op::kMultiGet, 10},  {Op::kMultiSet, 11}, {Op::kCancelWait, 12},
      {Op::kPing, 13},     {Op::kQueuePush, 14}, {Op::kQueuePop, 15}, {Op::kQueueLen, 16},
      {Op::kListKeys, 17}, {Op::kBarrier, 18}};
  for (const auto& [op, byte] : expected) {
    CHECK(wireFromOp(Dialect::kV2, op) == byte);
  }
  CHECK_FALSE(wireFromOp(Dialect::kV2, Op::kWatchKey).has_value());
  CHECK(wireFromOp(Dialect::kLegacy, Op::kWatchKey) == 7);
  CHECK(wireFromOp(Dialect::kLegacy, Op::kDeleteKey) == 8);
  CHECK_FALSE(opFromWire(Dialect::kV2, 19).has_value());
  // dtrun's own, far from torch's table: the handshake's and WAIT_GET.
  CHECK(wireFromOp(Dialect::kV2, Op::kWaitGet) == 0xA2);
  CHECK(opFromWire(Dialect::kV2, 0xA2) == Op::kWaitGet);
  CHECK_FALSE(wireFromOp(Dialect::kLegacy, Op::kWaitGet).has_value());
  CHECK_FALSE(opFromWire(Dialect::kLegacy, 9).has_value());
}

TEST_CASE("lengths over the limits are refused before anything is allocated", "[unit][rdzv]") {
  Limits limits;
  Request out;
  SECTION("a 2^60 key length") {
    std::string wire = unhex("03");
    appendU64(wire, 1ULL << 60U);
    const auto outcome = parseRequest(Dialect::kLegacy, wire, limits, out);
    CHECK(outcome.status == ParseStatus::kError);
    CHECK_THAT(outcome.error, Catch::Contains("key length 1152921504606846976 over the limit"));
  }
  SECTION("a value one byte over the limit") {
    std::string wire = unhex("01");
    appendBytes(wire, "/k");
    appendU64(wire, limits.maxValueLength + 1);
    CHECK(parseRequest(Dialect::kV2, wire, limits, out).status == ParseStatus::kError);
  }
  SECTION("too many keys in one request") {
    std::string wire = unhex("06");
    appendU64(wire, limits.maxKeysPerRequest + 1);
    CHECK(parseRequest(Dialect::kV2, wire, limits, out).status == ParseStatus::kError);
  }
  SECTION("a request whose fields add up past the request limit") {
    Limits small;
    small.maxRequestBytes = 64;
    std::string wire = unhex("0b");
    appendU64(wire, 3);
    for (int i = 0; i < 3; ++i) {
      appendBytes(wire, "/key");
      appendBytes(wire, std::string(20, 'v'));
    }
    CHECK(parseRequest(Dialect::kV2, wire, small, out).status == ParseStatus::kError);
  }
  SECTION("an unknown opcode") {
    const auto outcome = parseRequest(Dialect::kV2, unhex("ff"), limits, out);
    CHECK(outcome.status == ParseStatus::kError);
    CHECK_THAT(outcome.error, Catch::Contains("unknown opcode 255"));
  }
}

TEST_CASE("the dialect is told from a connection's first bytes", "[unit][rdzv]") {
  const Limits limits;
  CHECK(detectDialect("", limits) == DialectGuess::kNeedMore);
  CHECK(detectDialect(unhex("03"), limits) == DialectGuess::kLegacy);
  CHECK(detectDialect(unhex("00cef7"), limits) == DialectGuess::kNeedMore);
  CHECK(detectDialect(unhex("00cef7853c"), limits) == DialectGuess::kV2);
  CHECK(detectDialect(unhex("0005000000"), limits) == DialectGuess::kLegacy);  // SET, key of 5
  CHECK(detectDialect(unhex("00efbeadde"), limits) == DialectGuess::kReject);  // wrong magic
}
