// PyTorch TCPStore wire format, both dialects: pure functions, no I/O, no allocation beyond the
// request's key list. Thread-compatible (no shared state).
//
// A request is one opcode byte followed by fields: strings are u64 little-endian length + bytes,
// integers are little-endian. There is no frame header, so the parser must know each opcode's
// layout; it checks every length against Limits before anything is allocated for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::rdzv::detail {

// torch <= 2.0 (Debian's 1.13 speaks it) and torch >= 2.2 (VALIDATE handshake) number the same
// operations differently; a connection's first bytes tell which one it speaks.
enum class Dialect : std::uint8_t { kLegacy, kV2 };

enum class Op : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
  // dtrun's own, torch >= 2.2 dialect only, at opcodes far from torch's: the token handshake.
  kAuthChallenge,  // client nonce -> server nonce
  kAuthProof,      // HMAC(token, nonces) -> kAuthAccepted (or the connection closes)
  // WAIT on one key, answered with kStopWaiting and the key's value (u64 length + bytes) once it
  // is present: a WAIT and the GET after it in one round trip. A connection has at most one
  // wait pending while it waits this way; CANCEL_WAIT cancels it as a WAIT.
  kWaitGet,
};

// Wire opcodes of dtrun's own operations (not in torch's table).
constexpr std::uint8_t kAuthChallengeOpcode = 0xA0;
constexpr std::uint8_t kAuthProofOpcode = 0xA1;
constexpr std::uint8_t kWaitGetOpcode = 0xA2;
constexpr std::size_t kAuthFieldMax = 64;  // nonces and proofs are 32 bytes

std::string_view opName(Op op);
std::optional<Op> opFromWire(Dialect dialect, std::uint8_t byte);
std::optional<std::uint8_t> wireFromOp(Dialect dialect, Op op);

constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
// One-byte replies.
constexpr char kStopWaiting = 0x00;
constexpr char kWaitCanceled = 0x01;
constexpr char kCheckReady = 0x00;
constexpr char kCheckNotReady = 0x01;
constexpr char kAuthAccepted = 0x00;
constexpr char kAuthRefused = 0x01;
// WATCH_KEY (legacy dialect): registration reply and event types.
enum class WatchEvent : std::uint8_t { kUpdated = 0, kCreated = 1, kDeleted = 2, kRegistered = 3 };

struct Limits {
  std::size_t maxKeyLength = std::size_t{8} * 1024;
  std::size_t maxValueLength = std::size_t{8} * 1024 * 1024;
  std::size_t maxKeysPerRequest = std::size_t{128} * 1024;
  std::size_t maxRequestBytes =
      std::size_t{64} * 1024 * 1024;  // all fields of one request together
};

// Views into the parsed bytes: valid only as long as the input buffer is unchanged.
struct Request {
  Op op = Op::kSet;
  std::string_view key;
  std::string_view value;                // SET, APPEND, QUEUE_PUSH value; COMPARE_SET expected
  std::string_view desired;              // COMPARE_SET
  std::int64_t integer = 0;              // ADD delta, BARRIER world size
  std::uint32_t word = 0;                // VALIDATE magic, PING nonce
  std::string_view proof;                // AUTH_CHALLENGE client nonce, AUTH_PROOF MAC
  std::vector<std::string_view> keys;    // CHECK, WAIT, MULTI_GET, MULTI_SET
  std::vector<std::string_view> values;  // MULTI_SET
};

enum class ParseStatus : std::uint8_t { kNeedMore, kComplete, kError };

struct ParseOutcome {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  // kComplete: bytes of this request
  std::size_t needed = 0;    // kNeedMore: total bytes known to be needed so far (a lower bound)
  std::string error;         // kError: why, e.g. "key length 2^60 over the limit of 8192"
};

// Parses one request from the start of `input`. kNeedMore leaves `out` unspecified; calling again
// with more bytes re-parses from the start, which costs O(fields), never O(bytes).
ParseOutcome parseRequest(Dialect dialect, std::string_view input, const Limits& limits,
                          Request& out);

enum class DialectGuess : std::uint8_t { kNeedMore, kLegacy, kV2, kReject };
// torch >= 2.2 clients open with exactly 00 ce f7 85 3c (VALIDATE + magic). A legacy SET would put
// the low half of its key length there, so anything else starting with 00 is legacy if that length
// is plausible and garbage otherwise.
DialectGuess detectDialect(std::string_view firstBytes, const Limits& limits);

// Little-endian encoders, appending to `out`.
void appendU64(std::string& out, std::uint64_t value);
void appendI64(std::string& out, std::int64_t value);
void appendU32(std::string& out, std::uint32_t value);
void appendBytes(std::string& out, std::string_view bytes);  // u64 length + bytes

std::uint64_t loadU64(const char* bytes);
std::uint32_t loadU32(const char* bytes);

// Encodes `request` as a client sends it. Returns false if the dialect lacks the operation.
[[nodiscard]] bool encodeRequest(Dialect dialect, const Request& request, std::string& out);

}  // namespace dtrun::rdzv::detail
