#include "live/live_exchange.h"

#include <optional>
#include <utility>

#include <boost/asio/post.hpp>

#include "job/job.h"

namespace dtrun::agent::detail {

Result<std::unique_ptr<LiveExchange>> LiveExchange::connect(boost::asio::io_context& io,
                                                            const rdzv::StoreFactory& stores,
                                                            std::string runId, bool gathers) {
  DTRUN_ASSIGN_OR_RETURN(auto store, stores());
  return std::unique_ptr<LiveExchange>(
      new LiveExchange(io, std::move(store), std::move(runId), gathers));
}

LiveExchange::LiveExchange(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store,
                           std::string runId, bool gathers)
    : io_(io),
      store_(std::move(store)),
      runId_(std::move(runId)),
      gathers_(gathers),
      busy_(std::make_shared<bool>(false)),
      thread_(std::make_unique<TaskThread>()) {}

LiveExchange::~LiveExchange() { thread_.reset(); }

std::string LiveExchange::keyOf(int nodeRank) const {
  return "dtrun/" + runId_ + "/live/n" + std::to_string(nodeRank);
}

void LiveExchange::exchange(const NodeStatus& mine,
                            std::function<void(std::vector<NodeStatus>)> then) {
  if (*busy_) {
    return;
  }
  *busy_ = true;
  nlohmann::json published = toJson(mine);
  published["sequence"] = ++sequence_;
  std::vector<std::string> others;
  for (int node = 0; gathers_ && node < mine.nodeCount; ++node) {
    if (node != mine.nodeRank) {
      others.push_back(keyOf(node));
    }
  }
  thread_->post([this, busy = busy_, key = keyOf(mine.nodeRank), text = published.dump(),
                 others = std::move(others), then = std::move(then)]() mutable {
    std::vector<std::string> texts;
    bool ok = store_->set(key, text).isOk();
    for (std::size_t i = 0; ok && i < others.size(); ++i) {
      const auto value = store_->tryGet(others[i]);
      ok = value.isOk();
      if (ok && value.value()) {
        texts.push_back(*value.value());
      }
    }
    boost::asio::post(io_, [this, busy, ok, texts = std::move(texts), then = std::move(then)] {
      *busy = false;
      if (!ok) {
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      std::vector<NodeStatus> nodes;
      for (const std::string& t : texts) {
        const auto json = nlohmann::json::parse(t, nullptr, false);
        auto node = json.is_discarded() ? std::nullopt : nodeStatusFromJson(json);
        if (!node) {
          continue;
        }
        const auto sequence = json.value("sequence", std::uint64_t{0});
        Seen& seen = seen_[node->nodeRank];
        if (seen.sequence != sequence) {
          seen = Seen{sequence, now};
        }
        if (now - seen.changed < kStaleAfter) {
          nodes.push_back(std::move(*node));
        }
      }
      then(std::move(nodes));
    });
  });
}

}  // namespace dtrun::agent::detail
