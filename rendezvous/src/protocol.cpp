#include "protocol.h"

#include <array>
#include <cstring>

namespace dtrun::rdzv::detail {
namespace {

constexpr std::array<Op, 9> kLegacyTable = {Op::kSet,     Op::kCompareSet, Op::kGet,
                                            Op::kAdd,     Op::kCheck,      Op::kWait,
                                            Op::kNumKeys, Op::kWatchKey,   Op::kDeleteKey};
constexpr std::array<Op, 19> kV2Table = {
    Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,
    Op::kCheck,    Op::kWait,     Op::kNumKeys,    Op::kDeleteKey, Op::kAppend,
    Op::kMultiGet, Op::kMultiSet, Op::kCancelWait, Op::kPing,      Op::kQueuePush,
    Op::kQueuePop, Op::kQueueLen, Op::kListKeys,   Op::kBarrier};

// Reads fields sequentially; every accessor fails (returns false) once the input runs out or a
// limit is hit, recording which.
class FieldReader {
 public:
  FieldReader(std::string_view input, const Limits& limits) : input_(input), limits_(limits) {}

  bool byte(std::uint8_t& out) {
    if (!need(1)) {
      return false;
    }
    out = static_cast<std::uint8_t>(input_[pos_++]);
    return true;
  }
  bool u32(std::uint32_t& out) {
    if (!need(4)) {
      return false;
    }
    out = loadU32(input_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool i64(std::int64_t& out) {
    if (!need(8)) {
      return false;
    }
    out = static_cast<std::int64_t>(loadU64(input_.data() + pos_));
    pos_ += 8;
    return true;
  }
  bool bytes(std::string_view& out, std::size_t maxLength, const char* what) {
    if (!need(8)) {
      return false;
    }
    const std::uint64_t length = loadU64(input_.data() + pos_);
    if (length > maxLength) {
      return fail(std::string(what) + " length " + std::to_string(length) + " over the limit of " +
                  std::to_string(maxLength));
    }
    pos_ += 8;
    if (!need(length)) {
      return false;
    }
    out = input_.substr(pos_, length);
    pos_ += length;
    return true;
  }
  bool key(std::string_view& out) { return bytes(out, limits_.maxKeyLength, "key"); }
  bool value(std::string_view& out) { return bytes(out, limits_.maxValueLength, "value"); }
  bool count(std::size_t& out) {
    std::int64_t raw = 0;
    if (!i64(raw)) {
      return false;
    }
    const auto n = static_cast<std::uint64_t>(raw);
    if (n > limits_.maxKeysPerRequest) {
      return fail("key count " + std::to_string(n) + " over the limit of " +
                  std::to_string(limits_.maxKeysPerRequest));
    }
    out = n;
    return true;
  }

  bool fail(std::string why) {
    error_ = std::move(why);
    return false;
  }
  [[nodiscard]] bool failed() const { return !error_.empty(); }
  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] std::size_t position() const { return pos_; }
  [[nodiscard]] std::size_t needed() const { return needed_; }

 private:
  bool need(std::uint64_t n) {
    const std::uint64_t total = pos_ + n;
    if (total > limits_.maxRequestBytes) {
      return fail("request of at least " + std::to_string(total) + " bytes over the limit of " +
                  std::to_string(limits_.maxRequestBytes));
    }
    if (total > input_.size()) {
      needed_ = total;
      return false;
    }
    return true;
  }

  std::string_view input_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  std::size_t needed_ = 0;
  std::string error_;
};

bool readKeyList(FieldReader& reader, std::vector<std::string_view>& keys) {
  std::size_t n = 0;
  if (!reader.count(n)) {
    return false;
  }
  keys.clear();
  for (std::size_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!reader.key(key)) {
      return false;
    }
    keys.push_back(key);
  }
  return true;
}

bool readFields(FieldReader& reader, Request& out) {
  switch (out.op) {
    case Op::kAuthChallenge:
    case Op::kAuthProof:
      return reader.bytes(out.proof, kAuthFieldMax, "handshake field");
    case Op::kValidate:
    case Op::kPing:
      return reader.u32(out.word);
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      return reader.key(out.key) && reader.value(out.value);
    case Op::kCompareSet:
      return reader.key(out.key) && reader.value(out.value) && reader.value(out.desired);
    case Op::kGet:
    case Op::kWaitGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      return reader.key(out.key);
    case Op::kAdd:
    case Op::kBarrier:
      return reader.key(out.key) && reader.i64(out.integer);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return readKeyList(reader, out.keys);
    case Op::kMultiSet: {
      std::size_t n = 0;
      if (!reader.count(n)) {
        return false;
      }
      out.keys.clear();
      out.values.clear();
      for (std::size_t i = 0; i < n; ++i) {
        std::string_view key;
        std::string_view value;
        if (!reader.key(key) || !reader.value(value)) {
          return false;
        }
        out.keys.push_back(key);
        out.values.push_back(value);
      }
      return true;
    }
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return true;
  }
  return reader.fail("unhandled operation");
}

}  // namespace

std::string_view opName(Op op) {
  switch (op) {
    case Op::kValidate:
      return "VALIDATE";
    case Op::kSet:
      return "SET";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kNumKeys:
      return "GETNUMKEYS";
    case Op::kWatchKey:
      return "WATCH_KEY";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kAppend:
      return "APPEND";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kCancelWait:
      return "CANCEL_WAIT";
    case Op::kPing:
      return "PING";
    case Op::kQueuePush:
      return "QUEUE_PUSH";
    case Op::kQueuePop:
      return "QUEUE_POP";
    case Op::kQueueLen:
      return "QUEUE_LEN";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kAuthChallenge:
      return "AUTH_CHALLENGE";
    case Op::kAuthProof:
      return "AUTH_PROOF";
    case Op::kWaitGet:
      return "WAIT_GET";
  }
  return "UNKNOWN";
}

std::optional<Op> opFromWire(Dialect dialect, std::uint8_t byte) {
  if (dialect == Dialect::kLegacy) {
    if (byte < kLegacyTable.size()) {
      return kLegacyTable[byte];
    }
    return std::nullopt;
  }
  if (byte < kV2Table.size()) {
    return kV2Table[byte];
  }
  if (byte == kAuthChallengeOpcode) {
    return Op::kAuthChallenge;
  }
  if (byte == kAuthProofOpcode) {
    return Op::kAuthProof;
  }
  if (byte == kWaitGetOpcode) {
    return Op::kWaitGet;
  }
  return std::nullopt;
}

std::optional<std::uint8_t> wireFromOp(Dialect dialect, Op op) {
  const auto find = [op](const auto& table) -> std::optional<std::uint8_t> {
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table[i] == op) {
        return static_cast<std::uint8_t>(i);
      }
    }
    return std::nullopt;
  };
  if (dialect == Dialect::kLegacy) {
    return find(kLegacyTable);
  }
  if (op == Op::kAuthChallenge) {
    return kAuthChallengeOpcode;
  }
  if (op == Op::kAuthProof) {
    return kAuthProofOpcode;
  }
  if (op == Op::kWaitGet) {
    return kWaitGetOpcode;
  }
  return find(kV2Table);
}

ParseOutcome parseRequest(Dialect dialect, std::string_view input, const Limits& limits,
                          Request& out) {
  FieldReader reader(input, limits);
  std::uint8_t opcode = 0;
  if (!reader.byte(opcode)) {
    return {ParseStatus::kNeedMore, 0, 1, {}};
  }
  const auto op = opFromWire(dialect, opcode);
  if (!op) {
    return {ParseStatus::kError, 0, 0,
            "unknown opcode " + std::to_string(opcode) + " for the " +
                (dialect == Dialect::kLegacy ? "torch<=2.0" : "torch>=2.2") + " dialect"};
  }
  out.op = *op;
  if (readFields(reader, out)) {
    return {ParseStatus::kComplete, reader.position(), 0, {}};
  }
  if (reader.failed()) {
    return {ParseStatus::kError, 0, 0, std::string(opName(*op)) + ": " + reader.error()};
  }
  return {ParseStatus::kNeedMore, 0, reader.needed(), {}};
}

DialectGuess detectDialect(std::string_view firstBytes, const Limits& limits) {
  if (firstBytes.empty()) {
    return DialectGuess::kNeedMore;
  }
  if (firstBytes[0] != 0) {
    return DialectGuess::kLegacy;
  }
  if (firstBytes.size() < 5) {
    return DialectGuess::kNeedMore;
  }
  const std::uint32_t word = loadU32(firstBytes.data() + 1);
  if (word == kValidationMagic) {
    return DialectGuess::kV2;
  }
  return word > limits.maxKeyLength ? DialectGuess::kReject : DialectGuess::kLegacy;
}

void appendU64(std::string& out, std::uint64_t value) {
  std::array<char, 8> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xffU);
  }
  out.append(bytes.data(), bytes.size());
}

void appendI64(std::string& out, std::int64_t value) {
  appendU64(out, static_cast<std::uint64_t>(value));
}

void appendU32(std::string& out, std::uint32_t value) {
  std::array<char, 4> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xffU);
  }
  out.append(bytes.data(), bytes.size());
}

void appendBytes(std::string& out, std::string_view bytes) {
  appendU64(out, bytes.size());
  out.append(bytes);
}

std::uint64_t loadU64(const char* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8U) | static_cast<std::uint8_t>(bytes[i]);
  }
  return value;
}

std::uint32_t loadU32(const char* bytes) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) {
    value = (value << 8U) | static_cast<std::uint8_t>(bytes[i]);
  }
  return value;
}

bool encodeRequest(Dialect dialect, const Request& request, std::string& out) {
  const auto opcode = wireFromOp(dialect, request.op);
  if (!opcode) {
    return false;
  }
  out.push_back(static_cast<char>(*opcode));
  switch (request.op) {
    case Op::kValidate:
    case Op::kPing:
      appendU32(out, request.word);
      break;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      appendBytes(out, request.key);
      appendBytes(out, request.value);
      break;
    case Op::kCompareSet:
      appendBytes(out, request.key);
      appendBytes(out, request.value);
      appendBytes(out, request.desired);
      break;
    case Op::kGet:
    case Op::kWaitGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      appendBytes(out, request.key);
      break;
    case Op::kAdd:
    case Op::kBarrier:
      appendBytes(out, request.key);
      appendI64(out, request.integer);
      break;
    case Op::kAuthChallenge:
    case Op::kAuthProof:
      appendBytes(out, request.proof);
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      appendU64(out, request.keys.size());
      for (const auto key : request.keys) {
        appendBytes(out, key);
      }
      break;
    case Op::kMultiSet:
      appendU64(out, request.keys.size());
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        appendBytes(out, request.keys[i]);
        appendBytes(out, i < request.values.size() ? request.values[i] : std::string_view{});
      }
      break;
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      break;
  }
  return true;
}

}  // namespace dtrun::rdzv::detail
