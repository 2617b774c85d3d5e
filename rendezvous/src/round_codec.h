// The round protocol's key names and value encodings (JSON), shared by the keeper and members.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrun/round.h"

namespace dtrun::rdzv::detail {

// Keeper requests go to one queue for the whole store: "<jobId>" items.
inline constexpr const char* kKeeperRequests = "dtrun/keepers";

class RoundKeys {
 public:
  explicit RoundKeys(const std::string& jobId) : job_("dtrun/" + jobId + "/") {}
  [[nodiscard]] std::string keeper() const { return job_ + "keeper"; }  // the settings, once
  [[nodiscard]] std::string inbox() const { return job_ + "inbox"; }    // queue: keeper messages
  [[nodiscard]] std::string round() const { return job_ + "round"; }    // the open round
  [[nodiscard]] std::string finished() const { return job_ + "finished"; }
  // What the keeper knows, rewritten at every change of round: a successor resumes from it.
  [[nodiscard]] std::string keeperState() const { return job_ + "keeper_state"; }
  [[nodiscard]] std::string arrivals(int r) const { return in(r) + "arrivals"; }
  [[nodiscard]] std::string assign(int r, int slot) const {
    return in(r) + "assign/" + std::to_string(slot);
  }
  [[nodiscard]] std::string status(int r) const { return in(r) + "status"; }
  [[nodiscard]] std::string end(int r) const { return in(r) + "end"; }
  // Grouped joins (dtrun/group_relay.h): the tickets that make leaders, and group g's relay.
  [[nodiscard]] std::string groupTickets() const { return job_ + "group_tickets"; }
  [[nodiscard]] std::string group(int g) const { return job_ + "groups/" + std::to_string(g); }

 private:
  [[nodiscard]] std::string in(int r) const { return job_ + "r" + std::to_string(r) + "/"; }
  std::string job_;
};

// Keeper messages: "<verb> <round> <slot> <agentId>[ <payload>]", e.g. "join 3 0 host-a:1234
// {...}". A join carries the node's record as its payload, so the keeper reads nothing else per
// join.
struct KeeperMessage {
  std::string verb;  // join, hb, fail, done, leave, bye; lost (a watcher of leases: any round)
  int round = 0;
  int slot = -1;
  std::string agentId;
  std::string payload;  // join: encodeRecord(); otherwise empty
};
std::string encodeMessage(const KeeperMessage& message);
std::optional<KeeperMessage> decodeMessage(const std::string& text);
// A group relay's forwarded messages in one inbox item: "batch 0 -1 <relay> [<message>, ...]"
// (a JSON array of encoded messages). decodeBatch takes the payload; nullopt if malformed.
std::string encodeBatch(const std::string& relayId, const std::vector<std::string>& messages);
std::optional<std::vector<std::string>> decodeBatch(const std::string& payload);

std::string encodeSettings(const RoundSettings& settings);
std::optional<RoundSettings> decodeSettings(const std::string& text);

std::string encodeRecord(const NodeRecord& record);
std::optional<NodeRecord> decodeRecord(const std::string& text);

std::string encodeEnd(const RoundEnd& end);
std::optional<RoundEnd> decodeEnd(const std::string& text);

// An assignment, or what a node that got none should do: wait as a spare, or stop (closed).
struct AssignValue {
  enum class Kind : std::uint8_t { kMember, kSpare, kClosed };
  Kind kind = Kind::kMember;
  Assignment assignment;
  RoundEnd closedBy;
};
std::string encodeAssign(const AssignValue& value);
std::optional<AssignValue> decodeAssign(const std::string& text);

// The keeper's state between rounds: enough for a keeper that takes over to carry on.
struct KeeperState {
  int round = 0;
  int attempt = 0;
  int noProgressStreak = 0;
  int expected = 0;
  std::string phase;                                // gathering, running, exiting, closed
  std::vector<std::pair<int, NodeRecord>> members;  // (slot, record) by node rank
  std::vector<NodeRecord> spares;
  std::optional<RoundEnd> closedBy;
};
std::string encodeKeeperState(const KeeperState& state);
std::optional<KeeperState> decodeKeeperState(const std::string& text);

// Node ranks for `arrived` (in arrival order): explicit hints take their rank; the others fill
// the remaining ranks, the store host first, then by scheduler order, then by arrival. Returns
// the indices into `arrived` by node rank, at most `maxNodes` of them (the rest are spares).
std::vector<std::size_t> orderNodes(const std::vector<NodeRecord>& arrived, int maxNodes);

}  // namespace dtrun::rdzv::detail
