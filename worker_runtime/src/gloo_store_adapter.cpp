#include "gloo_store_adapter.h"

#include <charconv>
#include <string_view>
#include <utility>

#include <gloo/common/error.h>

namespace dtrun::runtime::detail {
namespace {

// Gloo's keys name a rank either bare ("3": the pair addresses) or as "rank_3" (the hostname).
int rankOfKey(std::string_view key) {
  constexpr std::string_view kRankPrefix = "rank_";
  if (key.starts_with(kRankPrefix)) {
    key.remove_prefix(kRankPrefix.size());
  }
  int rank = -1;
  const auto* end = key.data() + key.size();
  const auto [ptr, ec] = std::from_chars(key.data(), end, rank);
  return (ec == std::errc() && ptr == end) ? rank : -1;
}

}  // namespace

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<StoreHandle> store, const std::string& groupName,
                                   std::vector<int> globalRanks, std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      keyPrefix_(groupName + "/gloo/"),
      groupName_(groupName),
      globalRanks_(std::move(globalRanks)),
      timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  try {
    store_->set(keyPrefix_ + key, std::string(data.begin(), data.end()));
  } catch (const std::exception& e) {
    fail(e);
  }
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  try {
    // StoreHandle::get waits with the job's timeout; the group's may differ, so wait first.
    store_->wait({keyPrefix_ + key}, timeout_, waitingFor(key));
    const std::string value = store_->get(keyPrefix_ + key, waitingFor(key));
    return {value.begin(), value.end()};
  } catch (const std::exception& e) {
    fail(e);
  }
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  std::string what;
  for (const auto& key : keys) {
    full.push_back(keyPrefix_ + key);
    what += (what.empty() ? "" : ", ") + waitingFor(key);
  }
  try {
    store_->wait(full, timeout, what);
  } catch (const std::exception& e) {
    fail(e);
  }
}

std::exception_ptr GlooStoreAdapter::takeError() {
  const std::lock_guard<std::mutex> lock(errorMutex_);
  return std::exchange(error_, nullptr);
}

void GlooStoreAdapter::fail(const std::exception& error) {
  {
    const std::lock_guard<std::mutex> lock(errorMutex_);
    error_ = std::current_exception();
  }
  throw gloo::IoException(error.what());
}

std::string GlooStoreAdapter::waitingFor(const std::string& key) const {
  const int rank = rankOfKey(key);
  if (rank < 0 || rank >= static_cast<int>(globalRanks_.size())) {
    return "key '" + key + "' of gloo group '" + groupName_ + "'";
  }
  std::string who = "rank " + std::to_string(rank);
  if (globalRanks_[static_cast<std::size_t>(rank)] != rank) {
    who += " (job rank " + std::to_string(globalRanks_[static_cast<std::size_t>(rank)]) + ")";
  }
  return who + " to join gloo group '" + groupName_ + "'";
}

}  // namespace dtrun::runtime::detail
