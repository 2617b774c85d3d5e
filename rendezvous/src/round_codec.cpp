#include "round_codec.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

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

json recordJson(const NodeRecord& r) {
  return {{"agent", r.agentId},        {"host", r.host},
          {"nproc", r.nproc},          {"hint", r.nodeRankHint},
          {"sched", r.schedulerOrder}, {"store_host", r.storeHost}};
}

NodeRecord recordFrom(const json& j) {
  NodeRecord r;
  r.agentId = j.at("agent").get<std::string>();
  r.host = j.at("host").get<std::string>();
  r.nproc = j.at("nproc").get<int>();
  r.nodeRankHint = j.at("hint").get<int>();
  r.schedulerOrder = j.at("sched").get<int>();
  r.storeHost = j.at("store_host").get<bool>();
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
          {"exit_code", e.exitCode}};
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
  e.exitCode = j.at("exit_code").get<int>();
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

std::string encodeSettings(const RoundSettings& s) {
  return json{{"min", s.minNodes},
              {"max", s.maxNodes},
              {"max_restarts", s.maxRestarts},
              {"join_ms", s.joinTimeout.count()},
              {"last_call_ms", s.lastCallTimeout.count()},
              {"close_ms", s.closeTimeout.count()},
              {"keep_alive_ms", s.keepAliveInterval.count()},
              {"keep_alive_max_attempt", s.keepAliveMaxAttempt}}
      .dump();
}

std::optional<RoundSettings> decodeSettings(const std::string& text) {
  return parseWith<RoundSettings>(text, [](const json& j) {
    RoundSettings s;
    s.minNodes = j.at("min").get<int>();
    s.maxNodes = j.at("max").get<int>();
    s.maxRestarts = j.at("max_restarts").get<int>();
    s.joinTimeout = std::chrono::milliseconds(j.at("join_ms").get<std::int64_t>());
    s.lastCallTimeout = std::chrono::milliseconds(j.at("last_call_ms").get<std::int64_t>());
    s.closeTimeout = std::chrono::milliseconds(j.at("close_ms").get<std::int64_t>());
    s.keepAliveInterval = std::chrono::milliseconds(j.at("keep_alive_ms").get<std::int64_t>());
    s.keepAliveMaxAttempt = j.at("keep_alive_max_attempt").get<int>();
    if (s.minNodes < 1 || s.maxNodes < s.minNodes || s.keepAliveInterval.count() <= 0) {
      throw json::other_error::create(501, "inconsistent settings", nullptr);
    }
    return s;
  });
}

std::string encodeRecord(const NodeRecord& record) { return recordJson(record).dump(); }

std::optional<NodeRecord> decodeRecord(const std::string& text) {
  return parseWith<NodeRecord>(text, recordFrom);
}

std::string encodeEnd(const RoundEnd& end) { return endJson(end).dump(); }

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
  }
  return j.dump();
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
      a.round = j.at("round").get<int>();
      a.attempt = j.at("attempt").get<int>();
      a.nodeRank = j.at("node_rank").get<int>();
      a.nodeCount = j.at("node_count").get<int>();
      a.rankOffset = j.at("rank_offset").get<int>();
      a.worldSize = j.at("world_size").get<int>();
    }
    return v;
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
