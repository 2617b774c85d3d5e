#include "store_handle.h"

namespace dtrun::runtime {
namespace {

[[noreturn]] void raise(const Status& status, const std::string& what) {
  const std::string message = what + ": " + status.message();
  if (status.code() == Errc::kTimeout) {
    throw TimeoutError(message);
  }
  throw CommError(message);
}

}  // namespace

StoreHandle::StoreHandle(std::unique_ptr<rdzv::Store> store, std::string prefix,
                         std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

std::vector<std::string> StoreHandle::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) {
    out.push_back(full(key));
  }
  return out;
}

void StoreHandle::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto s = store_->set(full(key), value); !s.isOk()) {
    raise(s, "store set " + key);
  }
}

std::string StoreHandle::get(const std::string& key, const std::string& waitingFor) {
  wait({key}, timeout_, waitingFor);
  std::lock_guard<std::mutex> lock(mutex_);
  auto value = store_->get(full(key));
  if (!value.isOk()) {
    raise(value.status(), "store get " + key);
  }
  return std::move(value).value();
}

std::int64_t StoreHandle::add(const std::string& key, std::int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto value = store_->add(full(key), delta);
  if (!value.isOk()) {
    raise(value.status(), "store add " + key);
  }
  return value.value();
}

void StoreHandle::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                       const std::string& waitingFor) {
  const std::vector<std::string> fullKeys = full(keys);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto s = store_->wait(fullKeys, timeout); !s.isOk()) {
    if (s.code() == Errc::kTimeout && !waitingFor.empty()) {
      throw TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                         waitingFor);
    }
    raise(s, "store wait");
  }
}

bool StoreHandle::check(const std::vector<std::string>& keys) {
  const std::vector<std::string> fullKeys = full(keys);
  std::lock_guard<std::mutex> lock(mutex_);
  auto ready = store_->check(fullKeys);
  if (!ready.isOk()) {
    raise(ready.status(), "store check");
  }
  return ready.value();
}

bool StoreHandle::trySet(const std::string& key, const std::string& value) {
  const std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  return lock.owns_lock() && store_->set(full(key), value).isOk();
}

std::optional<std::string> StoreHandle::tryGetNow(const std::string& key) {
  const std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return std::nullopt;
  }
  auto value = store_->tryGet(full(key));
  return value.isOk() ? std::move(value).value() : std::nullopt;
}

}  // namespace dtrun::runtime
