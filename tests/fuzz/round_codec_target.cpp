#include <set>
#include <string>
#include <vector>

#include "fuzz_targets.h"
#include "round_codec.h"

namespace dtrun::fuzz {
namespace {

using rdzv::NodeRecord;
using rdzv::detail::decodeAssign;
using rdzv::detail::decodeEnd;
using rdzv::detail::decodeMessage;
using rdzv::detail::decodeRecord;
using rdzv::detail::decodeSettings;
using rdzv::detail::encodeAssign;
using rdzv::detail::encodeEnd;
using rdzv::detail::encodeMessage;
using rdzv::detail::encodeRecord;
using rdzv::detail::encodeSettings;
using rdzv::detail::orderNodes;

constexpr std::string_view kRoundCodec = "round_codec";

void checkMessage(const std::string& text) {
  const auto message = decodeMessage(text);
  if (!message) {
    return;
  }
  const auto again = decodeMessage(encodeMessage(*message));
  assertInvariant(again && again->verb == message->verb && again->round == message->round &&
                      again->slot == message->slot && again->agentId == message->agentId,
                  kRoundCodec, "a keeper message does not survive encode/decode");
}

void checkSettings(const std::string& text) {
  const auto settings = decodeSettings(text);
  if (!settings) {
    return;
  }
  // The keeper judges silence by this product: decoded settings must not overflow it.
  assertInvariant(settings->deadAfter().count() > 0, kRoundCodec,
                  "settings with no dead-node timeout");
  const auto again = decodeSettings(encodeSettings(*settings));
  assertInvariant(again && again->minNodes == settings->minNodes &&
                      again->maxNodes == settings->maxNodes &&
                      again->joinTimeout == settings->joinTimeout &&
                      again->keepAliveInterval == settings->keepAliveInterval &&
                      again->keepAliveMaxAttempt == settings->keepAliveMaxAttempt,
                  kRoundCodec, "settings do not survive encode/decode");
}

void checkEnd(const std::string& text) {
  const auto end = decodeEnd(text);
  if (!end) {
    return;
  }
  const auto again = decodeEnd(encodeEnd(*end));
  assertInvariant(again && again->kind == end->kind && again->message == end->message &&
                      again->detail == end->detail && again->exitCode == end->exitCode,
                  kRoundCodec, "a round end does not survive encode/decode");
}

void checkAssign(const std::string& text) {
  const auto value = decodeAssign(text);
  if (!value) {
    return;
  }
  const auto again = decodeAssign(encodeAssign(*value));
  assertInvariant(again && again->kind == value->kind &&
                      again->assignment.nodeRank == value->assignment.nodeRank &&
                      again->assignment.worldSize == value->assignment.worldSize,
                  kRoundCodec, "an assignment does not survive encode/decode");
}

// Every line that decodes as a node record joins the round; the keeper orders them.
void checkOrder(const std::vector<std::string>& lines, int maxNodes) {
  std::vector<NodeRecord> arrived;
  for (const auto& line : lines) {
    if (auto record = decodeRecord(line)) {
      const auto again = decodeRecord(encodeRecord(*record));
      assertInvariant(again && again->agentId == record->agentId && again->nproc == record->nproc &&
                          again->nodeRankHint == record->nodeRankHint,
                      kRoundCodec, "a node record does not survive encode/decode");
      arrived.push_back(std::move(*record));
    }
  }
  const auto order = orderNodes(arrived, maxNodes);
  assertInvariant(order.size() == std::min(arrived.size(), static_cast<std::size_t>(maxNodes)),
                  kRoundCodec, "orderNodes picks the wrong number of members");
  std::set<std::size_t> seen;
  for (const std::size_t i : order) {
    assertInvariant(i < arrived.size() && seen.insert(i).second, kRoundCodec,
                    "orderNodes repeats a node or invents one");
  }
}

}  // namespace

void roundCodec(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return;
  }
  // First byte: the round's max nodes; then one value per line, each tried by every decoder.
  const int maxNodes = data[0] % 16 + 1;
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): fuzz input is raw bytes
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& line : lines) {
    checkMessage(line);
    checkSettings(line);
    checkEnd(line);
    checkAssign(line);
  }
  checkOrder(lines, maxNodes);
}

}  // namespace dtrun::fuzz
