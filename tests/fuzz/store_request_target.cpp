#include <algorithm>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "kv_state.h"
#include "protocol.h"

namespace dtrun::fuzz {
namespace {

using rdzv::detail::ClientId;
using rdzv::detail::detectDialect;
using rdzv::detail::Dialect;
using rdzv::detail::DialectGuess;
using rdzv::detail::KvListener;
using rdzv::detail::KvState;
using rdzv::detail::Limits;
using rdzv::detail::Op;
using rdzv::detail::ParseOutcome;
using rdzv::detail::ParseStatus;
using rdzv::detail::Request;

constexpr std::string_view kStoreRequest = "store_request";

// Counts what the KvState asks the server to send, as ServerCore would route it.
class CountingListener final : public KvListener {
 public:
  void onWaitReleased(ClientId /*client*/) override { ++released_; }
  void onWatchEvent(ClientId /*client*/, std::string_view event) override {
    assertInvariant(!event.empty(), kStoreRequest, "a watch event has no bytes");
    ++events_;
  }

 private:
  std::size_t released_ = 0;
  std::size_t events_ = 0;
};

// Small limits, so that inputs of a few hundred bytes reach every limit check.
Limits smallLimits() {
  Limits limits;
  limits.maxKeyLength = 64;
  limits.maxValueLength = 256;
  limits.maxKeysPerRequest = 16;
  limits.maxRequestBytes = 2048;
  return limits;
}

// What Session::dispatch does with a request, minus the reply bytes.
void execute(KvState& kv, ClientId client, const Request& r) {
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
    case Op::kNumKeys:
    case Op::kAuthChallenge:  // the handshake touches no key
    case Op::kAuthProof:
      break;
    case Op::kSet:
      kv.set(r.key, r.value);
      assertInvariant(kv.get(r.key) != nullptr && *kv.get(r.key) == r.value, kStoreRequest,
                      "GET after SET does not return the value");
      break;
    case Op::kCompareSet:
      static_cast<void>(kv.compareSet(r.key, r.value, r.desired));
      break;
    case Op::kGet:
      static_cast<void>(kv.get(r.key));
      break;
    case Op::kAdd:
      static_cast<void>(kv.add(r.key, r.integer));
      break;
    case Op::kCheck:
      static_cast<void>(kv.check(r.keys));
      break;
    case Op::kWait:
      static_cast<void>(kv.wait(client, r.keys));
      break;
    case Op::kWaitGet:
      static_cast<void>(kv.wait(client, {r.key}));
      break;
    case Op::kWatchKey:
      kv.watch(client, r.key);
      break;
    case Op::kDeleteKey:
      static_cast<void>(kv.deleteKey(r.key));
      break;
    case Op::kAppend:
      kv.append(r.key, r.value);
      break;
    case Op::kMultiGet:
      for (const auto key : r.keys) {
        static_cast<void>(kv.get(key));
      }
      break;
    case Op::kMultiSet:
      assertInvariant(r.keys.size() == r.values.size(), kStoreRequest, "MULTI_SET keys != values");
      for (std::size_t i = 0; i < r.keys.size(); ++i) {
        kv.set(r.keys[i], r.values[i]);
      }
      break;
    case Op::kCancelWait:
      static_cast<void>(kv.cancelWaits(client));
      break;
    case Op::kQueuePush:
      kv.queuePush(r.key, r.value);
      break;
    case Op::kQueuePop: {
      std::string value;
      static_cast<void>(kv.queuePop(r.key, value));
      break;
    }
    case Op::kQueueLen:
      static_cast<void>(kv.queueLen(r.key));
      break;
    case Op::kListKeys: {
      std::size_t listed = 0;
      kv.forEachKey([&listed](const std::string&) { ++listed; });
      assertInvariant(listed == kv.numKeys(), kStoreRequest, "LIST_KEYS disagrees with GETNUMKEYS");
      break;
    }
    case Op::kBarrier:
      static_cast<void>(kv.barrier(client, r.key, r.integer));
      break;
  }
}

// Parses the stream request by request as the server does; every complete request must
// re-encode to exactly its bytes, and a prefix of it must never parse as complete.
void parseStream(Dialect dialect, std::string_view input, const Limits& limits, KvState& kv) {
  Request request;
  ClientId client = 1;
  while (!input.empty()) {
    const ParseOutcome outcome = parseRequest(dialect, input, limits, request);
    if (outcome.status == ParseStatus::kError) {
      assertInvariant(!outcome.error.empty(), kStoreRequest, "a parse error without a reason");
      return;
    }
    if (outcome.status == ParseStatus::kNeedMore) {
      assertInvariant(outcome.needed > input.size(), kStoreRequest,
                      "kNeedMore asks for no more bytes than it has");
      assertInvariant(outcome.needed <= limits.maxRequestBytes, kStoreRequest,
                      "kNeedMore asks for more than the request limit");
      return;
    }
    assertInvariant(outcome.consumed > 0 && outcome.consumed <= input.size(), kStoreRequest,
                    "a complete request consumed no bytes or more than it had");
    std::string encoded;
    const bool encodable = encodeRequest(dialect, request, encoded);
    assertInvariant(encodable, kStoreRequest, "a parsed request cannot be encoded in its dialect");
    assertInvariant(encoded == input.substr(0, outcome.consumed), kStoreRequest,
                    "a parsed request does not re-encode to its bytes");
    Request partial;
    const ParseOutcome shorter =
        parseRequest(dialect, input.substr(0, outcome.consumed - 1), limits, partial);
    assertInvariant(shorter.status != ParseStatus::kComplete, kStoreRequest,
                    "a request is complete one byte short");
    execute(kv, client, request);
    client = client % 3 + 1;  // three clients, so waits and barriers of others get released
    input.remove_prefix(outcome.consumed);
  }
}

}  // namespace

void storeRequest(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return;
  }
  // First byte: which limits and how the dialect is chosen; the rest is the connection's stream.
  const std::uint8_t mode = data[0];
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): fuzz input is raw bytes
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const Limits limits = (mode & 1U) != 0 ? smallLimits() : Limits{};
  CountingListener listener;
  KvState kv(listener);
  switch (mode >> 1U & 3U) {
    case 0:
      parseStream(Dialect::kLegacy, stream, limits, kv);
      break;
    case 1:
      parseStream(Dialect::kV2, stream, limits, kv);
      break;
    default:
      // As a server connection: the first bytes pick the dialect.
      switch (detectDialect(stream, limits)) {
        case DialectGuess::kLegacy:
          parseStream(Dialect::kLegacy, stream, limits, kv);
          break;
        case DialectGuess::kV2:
          parseStream(Dialect::kV2, stream, limits, kv);
          break;
        case DialectGuess::kNeedMore:
        case DialectGuess::kReject:
          break;
      }
  }
  // A client that goes away leaves nothing waiting.
  for (ClientId client = 1; client <= 3; ++client) {
    kv.dropClient(client);
  }
  assertInvariant(kv.pendingWaits() == 0, kStoreRequest, "waits survive their clients");
}

}  // namespace dtrun::fuzz
