#include "hang/progress_exchange.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "json_text.h"

namespace dtrun::agent::detail {

namespace {
constexpr std::int64_t kNsPerMs = 1000000;
}  // namespace

std::string encodeProgress(const std::vector<RankProgress>& ranks, std::int64_t nowNs) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankProgress& r : ranks) {
    const auto& s = r.snapshot;
    out.push_back({{"rank", r.rank},
                   {"pid", r.pid},
                   {"host", r.host},
                   {"ops", s.ops},
                   {"reports", s.pid != 0 || s.ops > 0},
                   {"op", s.op},
                   {"group", s.group},
                   {"bytes", s.bytes},
                   {"in_op_ms", s.opStartNs == 0 ? -1 : (nowNs - s.opStartNs) / kNsPerMs},
                   {"idle_ms", (nowNs - s.changedNs) / kNsPerMs}});
  }
  return jsonText(out);
}

std::vector<RankProgress> decodeProgress(const std::string& text, std::int64_t nowNs) {
  std::vector<RankProgress> ranks;
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_array()) {
    return ranks;
  }
  for (const auto& item : doc) {
    try {
      RankProgress r;
      r.rank = item.at("rank").get<int>();
      r.pid = item.at("pid").get<pid_t>();
      r.host = item.at("host").get<std::string>();
      r.snapshot.ops = item.at("ops").get<std::uint64_t>();
      // A writer is attached (hang_detector.h): an older agent's entry counts if it has ops.
      r.snapshot.pid = item.value("reports", r.snapshot.ops > 0) ? r.pid : 0;
      r.snapshot.op = item.at("op").get<std::string>();
      r.snapshot.group = item.at("group").get<std::string>();
      r.snapshot.bytes = item.at("bytes").get<std::uint64_t>();
      const auto inOp = item.at("in_op_ms").get<std::int64_t>();
      r.snapshot.opStartNs = inOp < 0 ? 0 : nowNs - inOp * kNsPerMs;
      r.snapshot.changedNs = nowNs - item.at("idle_ms").get<std::int64_t>() * kNsPerMs;
      ranks.push_back(std::move(r));
    } catch (const nlohmann::json::exception&) {
      continue;  // another version's entry, or damage: judge what can be read
    }
  }
  return ranks;
}

Result<std::unique_ptr<ProgressExchange>> ProgressExchange::connect(
    boost::asio::io_context& io, const rdzv::StoreFactory& stores, std::string jobId) {
  DTRUN_ASSIGN_OR_RETURN(auto store, stores());
  return std::unique_ptr<ProgressExchange>(
      new ProgressExchange(io, std::move(store), std::move(jobId)));
}

ProgressExchange::ProgressExchange(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store,
                                   std::string jobId)
    : io_(io),
      store_(std::move(store)),
      jobId_(std::move(jobId)),
      busy_(std::make_shared<bool>(false)),
      thread_(std::make_unique<TaskThread>()) {}

ProgressExchange::~ProgressExchange() { thread_.reset(); }

std::string ProgressExchange::keyOf(std::int64_t round, int nodeRank) const {
  return "dtrun/" + jobId_ + "/progress/r" + std::to_string(round) + "/n" +
         std::to_string(nodeRank);
}

void ProgressExchange::exchange(std::int64_t round, int nodeRank, int nodeCount,
                                const std::vector<RankProgress>& ranks, bool readOthers,
                                std::function<void(std::vector<RankProgress>)> then) {
  if (*busy_) {
    return;
  }
  *busy_ = true;
  std::vector<std::string> others;
  for (int node = 0; readOthers && node < nodeCount; ++node) {
    if (node != nodeRank) {
      others.push_back(keyOf(round, node));
    }
  }
  thread_->post([this, busy = busy_, mine = keyOf(round, nodeRank),
                 text = encodeProgress(ranks, progress::monotonicNs()), others = std::move(others),
                 then = std::move(then)]() mutable {
    std::vector<std::string> texts;
    bool ok = store_->set(mine, text).isOk();
    for (const std::string& key : others) {
      const std::vector<std::string> one = {key};
      const auto present = store_->check(one);
      if (!present.isOk()) {
        ok = false;
        break;
      }
      if (present.value()) {
        if (auto value = store_->get(key); value.isOk()) {
          texts.push_back(std::move(value).value());
        }
      }
    }
    const bool answer = ok && !others.empty();
    boost::asio::post(io_, [busy, answer, texts = std::move(texts), then = std::move(then)] {
      *busy = false;
      if (!answer) {
        return;
      }
      std::vector<RankProgress> found;
      const std::int64_t now = progress::monotonicNs();
      for (const std::string& t : texts) {
        auto decoded = decodeProgress(t, now);
        found.insert(found.end(), decoded.begin(), decoded.end());
      }
      then(std::move(found));
    });
  });
}

}  // namespace dtrun::agent::detail
