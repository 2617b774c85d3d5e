// A Store that opens its connection on its first call, for rdzv_bench's --connections 1.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

namespace dtrun::bench {

using rdzv::Bytes;
using rdzv::ClientOptions;
using std::chrono::milliseconds;

// A Store that connects on its first call: a node's notification connection, which join()
// never uses (--connections 1).
class LazyStore final : public dtrun::rdzv::Store {
 public:
  explicit LazyStore(ClientOptions options) : options_(std::move(options)) {}

  dtrun::Status set(std::string_view key, std::string_view value) override {
    DTRUN_TRY(open());
    return store_->set(key, value);
  }
  dtrun::Result<Bytes> get(std::string_view key) override {
    DTRUN_TRY(open());
    return store_->get(key);
  }
  dtrun::Result<std::optional<Bytes>> tryGet(std::string_view key) override {
    DTRUN_TRY(open());
    return store_->tryGet(key);
  }
  dtrun::Result<std::int64_t> add(std::string_view key, std::int64_t delta) override {
    DTRUN_TRY(open());
    return store_->add(key, delta);
  }
  dtrun::Result<Bytes> compareSet(std::string_view key, std::string_view expected,
                                  std::string_view desired) override {
    DTRUN_TRY(open());
    return store_->compareSet(key, expected, desired);
  }
  dtrun::Result<bool> check(std::span<const std::string> keys) override {
    DTRUN_TRY(open());
    return store_->check(keys);
  }
  dtrun::Status wait(std::span<const std::string> keys, milliseconds timeout) override {
    DTRUN_TRY(open());
    return store_->wait(keys, timeout);
  }
  dtrun::Result<std::int64_t> numKeys() override {
    DTRUN_TRY(open());
    return store_->numKeys();
  }
  dtrun::Result<bool> deleteKey(std::string_view key) override {
    DTRUN_TRY(open());
    return store_->deleteKey(key);
  }
  dtrun::Status append(std::string_view key, std::string_view value) override {
    DTRUN_TRY(open());
    return store_->append(key, value);
  }
  dtrun::Result<std::vector<Bytes>> multiGet(std::span<const std::string> keys) override {
    DTRUN_TRY(open());
    return store_->multiGet(keys);
  }
  dtrun::Status multiSet(std::span<const std::string> keys,
                         std::span<const Bytes> values) override {
    DTRUN_TRY(open());
    return store_->multiSet(keys, values);
  }
  dtrun::Result<std::chrono::microseconds> ping() override {
    DTRUN_TRY(open());
    return store_->ping();
  }
  dtrun::Status queuePush(std::string_view key, std::string_view value) override {
    DTRUN_TRY(open());
    return store_->queuePush(key, value);
  }
  dtrun::Result<Bytes> queuePop(std::string_view key, milliseconds timeout) override {
    DTRUN_TRY(open());
    return store_->queuePop(key, timeout);
  }
  dtrun::Result<std::vector<Bytes>> queuePopMany(std::string_view key, std::size_t maxItems,
                                                 milliseconds timeout) override {
    DTRUN_TRY(open());
    return store_->queuePopMany(key, maxItems, timeout);
  }
  dtrun::Result<std::int64_t> queueLen(std::string_view key) override {
    DTRUN_TRY(open());
    return store_->queueLen(key);
  }
  dtrun::Result<std::vector<Bytes>> listKeys() override {
    DTRUN_TRY(open());
    return store_->listKeys();
  }
  dtrun::Status barrier(std::string_view key, std::int64_t worldSize,
                        milliseconds timeout) override {
    DTRUN_TRY(open());
    return store_->barrier(key, worldSize, timeout);
  }
  [[nodiscard]] std::string peer() const override {
    return options_.host + ":" + std::to_string(options_.port);
  }

 private:
  dtrun::Status open() {
    if (!store_) {
      DTRUN_ASSIGN_OR_RETURN(store_, dtrun::rdzv::connectStore(options_));
    }
    return dtrun::Status::ok();
  }

  ClientOptions options_;
  std::unique_ptr<dtrun::rdzv::Store> store_;
};

}  // namespace dtrun::bench
