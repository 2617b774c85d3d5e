#include "kv_state.h"

#include <algorithm>
#include <charconv>

namespace dtrun::rdzv::detail {
namespace {

std::optional<std::int64_t> parseCounter(std::string_view text) {
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

void KvState::store(std::string_view key, std::string value) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    it = data_.emplace(std::string(key), std::move(value)).first;
    if (!watchersByKey_.empty()) {
      notifyWatchers(key, WatchEvent::kCreated, {}, it->second);
    }
  } else {
    if (!watchersByKey_.empty()) {
      const std::string old = std::exchange(it->second, std::move(value));
      notifyWatchers(key, WatchEvent::kUpdated, old, it->second);
    } else {
      it->second = std::move(value);
    }
  }
  keyWritten(key);
}

void KvState::set(std::string_view key, std::string_view value) { store(key, std::string(value)); }

std::string KvState::compareSet(std::string_view key, std::string_view expected,
                                std::string_view desired) {
  const auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) {
      return std::string(expected);
    }
    store(key, std::string(desired));
    return std::string(desired);
  }
  if (it->second == expected) {
    store(key, std::string(desired));
    return std::string(desired);
  }
  return it->second;
}

const std::string* KvState::get(std::string_view key) const {
  const auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

Result<std::int64_t> KvState::add(std::string_view key, std::int64_t delta) {
  std::int64_t current = 0;
  if (const auto* old = get(key)) {
    const auto parsed = parseCounter(*old);
    if (!parsed) {
      return Status::invalidArgument("ADD on a key whose value is not a decimal integer");
    }
    current = *parsed;
  }
  // Wrap around like the two's-complement arithmetic of upstream's int64 instead of overflowing.
  const auto next = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) +
                                              static_cast<std::uint64_t>(delta));
  store(key, std::to_string(next));
  return next;
}

void KvState::append(std::string_view key, std::string_view value) {
  const auto* old = get(key);
  std::string next = old != nullptr ? *old : std::string();
  next.append(value);
  store(key, std::move(next));
}

bool KvState::deleteKey(std::string_view key) {
  const auto it = data_.find(key);
  if (it == data_.end()) {
    return false;
  }
  const std::string old = std::move(it->second);
  data_.erase(it);
  notifyWatchers(key, WatchEvent::kDeleted, old, {});
  return true;
}

void KvState::forEachKey(const std::function<void(const std::string&)>& visit) const {
  for (const auto& [key, value] : data_) {
    visit(key);
  }
}

bool KvState::present(std::string_view key) const {
  if (data_.find(key) != data_.end()) {
    return true;
  }
  const auto queue = queues_.find(key);
  return queue != queues_.end() && !queue->second.empty();
}

bool KvState::check(const std::vector<std::string_view>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](std::string_view k) { return present(k); });
}

KvState::WaitId KvState::registerWait(ClientId client, Wait wait) {
  const WaitId id = nextWaitId_++;
  for (const auto& key : wait.keys) {
    auto it = waitersByKey_.find(key);
    if (it == waitersByKey_.end()) {
      it = waitersByKey_.emplace(key, std::vector<WaitId>{}).first;
    }
    it->second.push_back(id);
  }
  waitsByClient_[client].push_back(id);
  waits_.emplace(id, std::move(wait));
  return id;
}

bool KvState::wait(ClientId client, const std::vector<std::string_view>& keys) {
  Wait pending;
  pending.client = client;
  for (const auto key : keys) {
    if (!present(key) &&
        std::find(pending.keys.begin(), pending.keys.end(), key) == pending.keys.end()) {
      pending.keys.emplace_back(key);
    }
  }
  if (pending.keys.empty()) {
    return true;
  }
  pending.remaining = pending.keys.size();
  registerWait(client, std::move(pending));
  return false;
}

Result<bool> KvState::barrier(ClientId client, std::string_view key, std::int64_t worldSize) {
  // Releases earlier arrivals once the target is reached.
  DTRUN_ASSIGN_OR_RETURN(const std::int64_t count, add(key, 1));
  if (count >= worldSize) {
    return true;
  }
  Wait pending;
  pending.client = client;
  pending.barrierTarget = worldSize;
  pending.keys.emplace_back(key);
  registerWait(client, std::move(pending));
  return false;
}

void KvState::keyWritten(std::string_view key, bool wakeOnlyOne) {
  const auto it = waitersByKey_.find(key);
  if (it == waitersByKey_.end()) {
    return;
  }
  // Copy: release() edits waitersByKey_, and listeners may not re-enter, but unregister does.
  const std::vector<WaitId> waiting = it->second;
  std::optional<std::int64_t> counter;
  for (const WaitId id : waiting) {
    const auto wit = waits_.find(id);
    if (wit == waits_.end()) {
      continue;
    }
    Wait& w = wit->second;
    if (w.barrierTarget >= 0) {
      if (!counter) {
        const auto* value = get(key);
        counter = value != nullptr ? parseCounter(*value).value_or(0) : 0;
      }
      if (*counter >= w.barrierTarget) {
        release(id);
      }
      continue;
    }
    // This key no longer blocks the wait: take it off the key's list and count it down.
    auto& list = waitersByKey_[std::string(key)];
    list.erase(std::remove(list.begin(), list.end(), id), list.end());
    std::erase(w.keys, key);
    if (--w.remaining == 0) {
      release(id);
    }
    if (wakeOnlyOne) {
      break;
    }
  }
  const auto after = waitersByKey_.find(key);
  if (after != waitersByKey_.end() && after->second.empty()) {
    waitersByKey_.erase(after);
  }
}

void KvState::unregister(WaitId id) {
  const auto wit = waits_.find(id);
  if (wit == waits_.end()) {
    return;
  }
  for (const auto& key : wit->second.keys) {
    const auto it = waitersByKey_.find(key);
    if (it != waitersByKey_.end()) {
      std::erase(it->second, id);
      if (it->second.empty()) {
        waitersByKey_.erase(it);
      }
    }
  }
  const auto cit = waitsByClient_.find(wit->second.client);
  if (cit != waitsByClient_.end()) {
    std::erase(cit->second, id);
    if (cit->second.empty()) {
      waitsByClient_.erase(cit);
    }
  }
  waits_.erase(wit);
}

void KvState::release(WaitId id) {
  const auto wit = waits_.find(id);
  if (wit == waits_.end()) {
    return;
  }
  const ClientId client = wit->second.client;
  unregister(id);
  listener_.onWaitReleased(client);
}

std::size_t KvState::cancelWaits(ClientId client) {
  const auto it = waitsByClient_.find(client);
  if (it == waitsByClient_.end()) {
    return 0;
  }
  const std::vector<WaitId> ids = it->second;
  for (const WaitId id : ids) {
    unregister(id);
  }
  return ids.size();
}

void KvState::queuePush(std::string_view key, std::string_view value) {
  auto it = queues_.find(key);
  if (it == queues_.end()) {
    it = queues_.emplace(std::string(key), std::deque<std::string>{}).first;
  }
  it->second.emplace_back(value);
  // One pushed item can satisfy only one blocked pop.
  keyWritten(key, /*wakeOnlyOne=*/true);
}

std::size_t KvState::queuePop(std::string_view key, std::string& value) {
  const auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) {
    return 0;
  }
  const std::size_t length = it->second.size();
  value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    queues_.erase(it);
  }
  return length;
}

std::size_t KvState::queueLen(std::string_view key) const {
  const auto it = queues_.find(key);
  return it == queues_.end() ? 0 : it->second.size();
}

void KvState::watch(ClientId client, std::string_view key) {
  auto it = watchersByKey_.find(key);
  if (it == watchersByKey_.end()) {
    it = watchersByKey_.emplace(std::string(key), std::vector<ClientId>{}).first;
  }
  it->second.push_back(client);
}

void KvState::notifyWatchers(std::string_view key, WatchEvent event, std::string_view oldValue,
                             std::string_view newValue) {
  const auto it = watchersByKey_.find(key);
  if (it == watchersByKey_.end()) {
    return;
  }
  std::string encoded;
  encoded.push_back(static_cast<char>(event));
  appendBytes(encoded, key);
  appendBytes(encoded, oldValue);
  appendBytes(encoded, newValue);
  for (const ClientId client : it->second) {
    listener_.onWatchEvent(client, encoded);
  }
}

void KvState::dropClient(ClientId client) {
  static_cast<void>(cancelWaits(client));
  for (auto it = watchersByKey_.begin(); it != watchersByKey_.end();) {
    std::erase(it->second, client);
    it = it->second.empty() ? watchersByKey_.erase(it) : std::next(it);
  }
}

}  // namespace dtrun::rdzv::detail
