#include "round_codec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "json_text.h"

namespace dtrun::rdzv::detail {
namespace {

using nlohmann::json;

// Parses `text` as a JSON object and hands it to `read`; nullopt on any malformed input (a
// value written by a foreign client must not crash the keeper or an agent).
template <typename T, typename Fn>
std::optional<T> parseWith(const std::string& text, Fn&& read) {
  try {
    const json j = json::parse(text);
    if (!j.is_object()) {
      return std::nullopt;
    }
    return std::forward<Fn>(read)(j);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// nlohmann's get<int>() converts a float, or an integer too large for the type, with a plain
// cast: undefined behaviour for 3e63. A foreign value must be an integer that fits, or nothing.
template <typename Int>
Int integer(const json& j, const char* name) {
  const json& v = j.at(name);
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) {
      return static_cast<Int>(u);
    }
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= std::numeric_limits<Int>::min() && i <= std::numeric_limits<Int>::max()) {
      return static_cast<Int>(i);
    }
  }
  throw json::other_error::create(501, std::string(name) + ": not an integer in range", nullptr);
}

json recordJson(const NodeRecord& r) {
  json j = {{"agent", r.agentId},        {"host", r.host},
            {"nproc", r.nproc},          {"hint", r.nodeRankHint},
            {"sched", r.schedulerOrder}, {"store_host", r.storeHost}};
  if (r.workerStorePort != 0) {
    j["worker_store"] = r.workerStorePort;
  }
  return j;
}

NodeRecord recordFrom(const json& j) {
  NodeRecord r;
  r.agentId = j.at("agent").get<std::string>();
  r.host = j.at("host").get<std::string>();
  r.nproc = integer<int>(j, "nproc");
  r.nodeRankHint = integer<int>(j, "hint");
  r.schedulerOrder = integer<int>(j, "sched");
  r.storeHost = j.at("store_host").get<bool>();
  r.workerStorePort = j.contains("worker_store") ? integer<std::uint16_t>(j, "worker_store") : 0;
  if (r.nproc < 1) {
    throw json::other_error::create(501, "nproc must be positive", nullptr);
  }
  return r;
}

constexpr std::array kKindNames = {"failure", "membership", "success", "closed"};

json endJson(const RoundEnd& e) {
  return {{"kind", kKindNames.at(static_cast<std::size_t>(e.kind))},
          {"message", e.message},
          {"detail", e.detail},
          {"exit_code", e.exitCode},
          {"progressed", e.progressed},
          {"no_restart", e.noRestart}};
}

RoundEnd endFrom(const json& j) {
  RoundEnd e;
  const auto kind = j.at("kind").get<std::string>();
  const auto* it = std::find(kKindNames.begin(), kKindNames.end(), kind);
  if (it == kKindNames.end()) {
    throw json::other_error::create(501, "unknown end kind", nullptr);
  }
  e.kind = static_cast<RoundEnd::Kind>(it - kKindNames.begin());
  e.message = j.at("message").get<std::string>();
  e.detail = j.at("detail").get<std::string>();
  e.exitCode = integer<int>(j, "exit_code");
  // Absent in an older agent's end: progress assumed, restarts allowed.
  e.progressed = j.value("progressed", true);
  e.noRestart = j.value("no_restart", false);
  return e;
}

}  // namespace

std::string encodeMessage(const KeeperMessage& m) {
  std::string text =
      m.verb + " " + std::to_string(m.round) + " " + std::to_string(m.slot) + " " + m.agentId;
  if (!m.payload.empty()) {
    text += " " + m.payload;
  }
  return text;
}

std::optional<KeeperMessage> decodeMessage(const std::string& text) {
  std::istringstream in(text);
  KeeperMessage m;
  if (!(in >> m.verb >> m.round >> m.slot >> m.agentId)) {
    return std::nullopt;
  }
  if (in.peek() == ' ') {
    in.get();
    std::getline(in, m.payload, '\0');
  }
  return m;
}

std::string encodeBatch(const std::string& relayId, const std::vector<std::string>& messages) {
  return encodeMessage(KeeperMessage{"batch", 0, -1, relayId, jsonText(json(messages))});
}

std::optional<std::vector<std::string>> decodeBatch(const std::string& payload) {
  try {
    const json j = json::parse(payload);
    if (!j.is_array() ||
        !std::all_of(j.begin(), j.end(), [](const json& item) { return item.is_string(); })) {
      return std::nullopt;
    }
    return j.get<std::vector<std::string>>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string encodeSettings(const RoundSettings& s) {
  return jsonText(json{{"min", s.minNodes},
                       {"max", s.maxNodes},
                       {"max_restarts", s.maxRestarts},
                       {"join_ms", s.joinTimeout.count()},
                       {"last_call_ms", s.lastCallTimeout.count()},
                       {"close_ms", s.closeTimeout.count()},
                       {"keep_alive_ms", s.keepAliveInterval.count()},
                       {"keep_alive_max_attempt", s.keepAliveMaxAttempt},
                       {"max_no_progress", s.maxNoProgress}});
}

std::optional<RoundSettings> decodeSettings(const std::string& text) {
  return parseWith<RoundSettings>(text, [](const json& j) {
    RoundSettings s;
    s.minNodes = integer<int>(j, "min");
    s.maxNodes = integer<int>(j, "max");
    s.maxRestarts = integer<int>(j, "max_restarts");
    s.joinTimeout = std::chrono::milliseconds(integer<std::int64_t>(j, "join_ms"));
    s.lastCallTimeout = std::chrono::milliseconds(integer<std::int64_t>(j, "last_call_ms"));
    s.closeTimeout = std::chrono::milliseconds(integer<std::int64_t>(j, "close_ms"));
    s.keepAliveInterval = std::chrono::milliseconds(integer<std::int64_t>(j, "keep_alive_ms"));
    s.keepAliveMaxAttempt = integer<int>(j, "keep_alive_max_attempt");
    s.maxNoProgress = j.contains("max_no_progress") ? integer<int>(j, "max_no_progress") : 0;
    // --rdzv_conf's bounds (1e7 s, 1000 attempts): deadAfter() = their product cannot overflow.
    constexpr std::int64_t kMaxMs = std::int64_t{10'000'000} * 1000;
    if (s.minNodes < 1 || s.maxNodes < s.minNodes || s.keepAliveInterval.count() <= 0 ||
        s.keepAliveInterval.count() > kMaxMs || s.keepAliveMaxAttempt < 1 ||
        s.keepAliveMaxAttempt > 1000) {
      throw json::other_error::create(501, "inconsistent settings", nullptr);
    }
    return s;
  });
}

std::string encodeRecord(const NodeRecord& record) { return jsonText(recordJson(record)); }

std::optional<NodeRecord> decodeRecord(const std::string& text) {
  return parseWith<NodeRecord>(text, recordFrom);
}

std::string encodeEnd(const RoundEnd& end) { return jsonText(endJson(end)); }

std::optional<RoundEnd> decodeEnd(const std::string& text) {
  return parseWith<RoundEnd>(text, endFrom);
}

std::string encodeAssign(const AssignValue& v) {
  json j;
  if (v.kind == AssignValue::Kind::kSpare) {
    j = {{"spare", true}};
  } else if (v.kind == AssignValue::Kind::kClosed) {
    j = {{"closed", endJson(v.closedBy)}};
  } else {
    const Assignment& a = v.assignment;
    j = {{"round", a.round},          {"attempt", a.attempt},        {"node_rank", a.nodeRank},
         {"node_count", a.nodeCount}, {"rank_offset", a.rankOffset}, {"world_size", a.worldSize}};
    if (a.masterPort != 0) {
      j["master_addr"] = a.masterAddr;
      j["master_port"] = a.masterPort;
    }
  }
  return jsonText(j);
}

std::optional<AssignValue> decodeAssign(const std::string& text) {
  return parseWith<AssignValue>(text, [](const json& j) {
    AssignValue v;
    if (j.contains("spare")) {
      v.kind = AssignValue::Kind::kSpare;
    } else if (j.contains("closed")) {
      v.kind = AssignValue::Kind::kClosed;
      v.closedBy = endFrom(j.at("closed"));
    } else {
      Assignment& a = v.assignment;
      a.round = integer<int>(j, "round");
      a.attempt = integer<int>(j, "attempt");
      a.nodeRank = integer<int>(j, "node_rank");
      a.nodeCount = integer<int>(j, "node_count");
      a.rankOffset = integer<int>(j, "rank_offset");
      a.worldSize = integer<int>(j, "world_size");
      if (j.contains("master_port")) {
        a.masterAddr = j.at("master_addr").get<std::string>();
        a.masterPort = integer<std::uint16_t>(j, "master_port");
      }
    }
    return v;
  });
}

std::string encodeKeeperState(const KeeperState& k) {
  json members = json::array();
  for (const auto& [slot, record] : k.members) {
    members.push_back({{"slot", slot}, {"record", recordJson(record)}});
  }
  json spares = json::array();
  for (const auto& record : k.spares) {
    spares.push_back(recordJson(record));
  }
  json j = {{"round", k.round},       {"attempt", k.attempt}, {"no_progress", k.noProgressStreak},
            {"expected", k.expected}, {"phase", k.phase},     {"members", members},
            {"spares", spares}};
  if (k.closedBy) {
    j["closed_by"] = endJson(*k.closedBy);
  }
  return jsonText(j);
}

std::optional<KeeperState> decodeKeeperState(const std::string& text) {
  return parseWith<KeeperState>(text, [](const json& j) {
    KeeperState k;
    k.round = integer<int>(j, "round");
    k.attempt = integer<int>(j, "attempt");
    k.noProgressStreak = integer<int>(j, "no_progress");
    k.expected = integer<int>(j, "expected");
    k.phase = j.at("phase").get<std::string>();
    for (const auto& m : j.at("members")) {
      k.members.emplace_back(integer<int>(m, "slot"), recordFrom(m.at("record")));
    }
    for (const auto& r : j.at("spares")) {
      k.spares.push_back(recordFrom(r));
    }
    if (j.contains("closed_by")) {
      k.closedBy = endFrom(j.at("closed_by"));
    }
    return k;
  });
}

std::vector<std::size_t> orderNodes(const std::vector<NodeRecord>& arrived, int maxNodes) {
  std::vector<std::size_t> order(arrived.size());
  std::iota(order.begin(), order.end(), 0);
  // Unhinted nodes by (store host first, scheduler order, arrival); hinted ones by hint.
  const auto key = [&](std::size_t i) {
    const NodeRecord& r = arrived[i];
    const int sched = r.schedulerOrder < 0 ? std::numeric_limits<int>::max() : r.schedulerOrder;
    return std::tuple(r.storeHost ? 0 : 1, sched, i);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  const std::size_t count = std::min(arrived.size(), static_cast<std::size_t>(maxNodes));
  // Hinted nodes take their rank when it exists and is free; the others fill the gaps in order.
  std::vector<std::size_t> byRank(count, arrived.size());
  std::vector<std::size_t> rest;
  for (const std::size_t i : order) {
    const int hint = arrived[i].nodeRankHint;
    if (hint >= 0 && static_cast<std::size_t>(hint) < count && byRank[hint] == arrived.size()) {
      byRank[static_cast<std::size_t>(hint)] = i;
    } else {
      rest.push_back(i);
    }
  }
  auto next = rest.begin();
  for (auto& slot : byRank) {
    if (slot == arrived.size()) {
      slot = *next++;
    }
  }
  return byRank;
}

}  // namespace dtrun::rdzv::detail
