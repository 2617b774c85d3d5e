#include "gloo_group.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <exception>
#include <sstream>

#include <gloo/rendezvous/context.h>

#include "gloo_store_adapter.h"

namespace dtrun::runtime::detail {
namespace {

bool mentionsTimeout(const std::string& message) {
  return message.find("Timed out") != std::string::npos ||
         message.find("timeout") != std::string::npos ||
         message.find("timed out") != std::string::npos;
}

}  // namespace

void GlooGroup::connect(const std::string& op) {
  auto context = std::make_shared<gloo::rendezvous::Context>(config_.rank, config_.size);
  context->setTimeout(config_.timeout);
  GlooStoreAdapter store(config_.store, config_.groupName, config_.globalRanks, config_.timeout);
  auto device = device_;  // connectFullMesh takes a non-const reference
  try {
    context->connectFullMesh(store, device);
  } catch (const gloo::IoException& e) {
    if (const auto storeError = store.takeError(); storeError != nullptr) {
      rethrowWithContext(op, storeError);
    }
    raise(op, otherRanks(), e.what(), config_.timeout);
  } catch (const gloo::Exception& e) {
    raise(op, otherRanks(), e.what(), config_.timeout);
  } catch (const gloo::EnforceNotMet& e) {
    raise(op, otherRanks(), e.what(), config_.timeout);
  }
  learnPeerAddresses(*context, op);
  context_ = std::move(context);
}

std::vector<int> GlooGroup::otherRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < config_.size; ++r) {
    if (r != config_.rank) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

void GlooGroup::failIfBroken(const std::string& op) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!brokenBy_.empty()) {
    throw CommError(op + ": the gloo group '" + config_.groupName +
                    "' is unusable after an earlier failure (" + brokenBy_ + ")");
  }
}

std::string GlooGroup::describeRank(int rank) const {
  std::string text = "rank " + std::to_string(rank);
  const auto index = static_cast<std::size_t>(rank);
  if (index < config_.globalRanks.size() && config_.globalRanks[index] != rank) {
    text += " (job rank " + std::to_string(config_.globalRanks[index]) + ")";
  }
  return text;
}

std::vector<int> GlooGroup::ringNeighbours(int extra) const {
  const int n = config_.size;
  std::vector<int> ranks{(config_.rank + n - 1) % n, (config_.rank + 1) % n};
  if (extra >= 0 && extra != config_.rank) {
    ranks.push_back(extra);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

int GlooGroup::broadcastParent(int root) const {
  const auto size = static_cast<unsigned>(config_.size);
  const auto virtualRank =
      (static_cast<unsigned>(config_.rank) + size - static_cast<unsigned>(root)) % size;
  const unsigned parent = virtualRank & ~std::bit_floor(virtualRank);
  return static_cast<int>((parent + static_cast<unsigned>(root)) % size);
}

std::string GlooGroup::describePeers(const std::vector<int>& peers) const {
  if (peers.size() == 1) {
    return describeRank(peers.front());
  }
  return "one of " + rankList(peers);  // "one of ranks 0, 2"
}

std::optional<int> GlooGroup::peerNamedIn(const std::string& glooMessage) const {
  for (const auto& [address, rank] : peerAddresses_) {
    for (auto at = glooMessage.find(address); at != std::string::npos;
         at = glooMessage.find(address, at + 1)) {
      const auto after = at + address.size();  // ":1259" must not match ":12590"
      if (after == glooMessage.size() || std::isdigit(glooMessage[after]) == 0) {
        return rank;
      }
    }
  }
  return std::nullopt;
}

std::string GlooGroup::failureKey(int rank) const {
  return config_.groupName + "/gloo/failed/" + std::to_string(rank);
}

void GlooGroup::abandon(const std::string& why) {
  if (!context_) {
    return;  // failed while connecting: no pair to close, no peer blocked on one
  }
  // First the record, then the closes: a peer that sees a closed connection finds it.
  static_cast<void>(config_.store->trySet(failureKey(config_.rank), why));
  context_->closeConnections();
}

std::string GlooGroup::causeRecordedBy(int rank) const {
  return config_.store->tryGetNow(failureKey(rank)).value_or(std::string());
}

void GlooGroup::raise(const std::string& op, const std::vector<int>& peers,
                      const std::string& glooMessage, std::chrono::milliseconds timeout) {
  const auto peer = peerNamedIn(glooMessage);
  const std::string who = peer ? describeRank(*peer) : describePeers(peers);
  const bool timedOut = mentionsTimeout(glooMessage);
  const auto limit = timeout.count() > 0 ? timeout : config_.timeout;
  std::string what = timedOut ? op + ": timed out after " + std::to_string(limit.count()) +
                                    " ms waiting for " + who
                              : op + ": connection to " + who + " failed";
  if (peer && !timedOut) {
    // The peer may have closed on us because it failed first: then its cause is the story.
    if (const std::string cause = causeRecordedBy(*peer); !cause.empty()) {
      what += "; " + who + " had failed first (" + cause + ")";
    }
  }
  bool first = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    first = brokenBy_.empty();
    if (first) {
      brokenBy_ = what;
    }
  }
  if (first) {
    abandon(what);
  }
  const std::string where = " [gloo group '" + config_.groupName + "' of " +
                            std::to_string(config_.size) + ", this is rank " +
                            std::to_string(config_.rank) + "; gloo: " + glooMessage + "]";
  if (timedOut) {
    throw TimeoutError(what + where);
  }
  throw CommError(what + where);
}

void GlooGroup::learnPeerAddresses(gloo::Context& context, const std::string& op) {
  std::string mine;
  for (int r = 0; r < config_.size; ++r) {
    if (r != config_.rank) {
      mine += context.getPair(r)->address().str();
    }
    mine += '\n';
  }
  const std::string prefix = config_.groupName + "/gloo/peer_addresses/";
  try {
    config_.store->set(prefix + std::to_string(config_.rank), mine);
    for (const int peer : otherRanks()) {
      const std::string key = prefix + std::to_string(peer);
      config_.store->wait({key}, config_.timeout, describeRank(peer) + " to finish joining");
      std::istringstream theirs(config_.store->get(key));
      std::string address;  // line `config_.rank` of theirs: its address for this rank
      for (int r = 0; r <= config_.rank; ++r) {
        if (!std::getline(theirs, address)) {
          address.clear();
          break;
        }
      }
      if (!address.empty()) {
        peerAddresses_.emplace(address, peer);
      }
    }
  } catch (const TimeoutError& e) {
    throw TimeoutError(op + ": " + e.what());
  } catch (const Error& e) {
    throw CommError(op + ": " + e.what());
  }
}

void GlooGroup::rethrowWithContext(const std::string& op, const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    throw TimeoutError(op + ": " + e.what());
  } catch (const std::exception& e) {
    throw CommError(op + ": " + e.what());
  }
}

}  // namespace dtrun::runtime::detail
