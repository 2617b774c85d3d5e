// Gloo's rendezvous store interface over our StoreHandle, so connectFullMesh exchanges pair
// addresses through the agent's store. Keys live under "<groupName>/gloo/", inside the attempt's
// prefix, so neither other groups nor earlier attempts collide (connectFullMesh always writes the
// same key names: "<rank>" and "rank_<rank>").
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "store_handle.h"

namespace dtrun::runtime::detail {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  // `globalRanks` only makes messages name job ranks ("rank 2 (job rank 5)").
  GlooStoreAdapter(std::shared_ptr<StoreHandle> store, const std::string& groupName,
                   std::vector<int> globalRanks, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists (connectFullMesh calls get without waiting first).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Gloo only understands gloo::IoException, so failures are thrown as that; the runtime error
  // behind the latest one (TimeoutError naming the missing rank, CommError) is kept here so the
  // caller can rethrow it with its type and message intact. Null if none.
  [[nodiscard]] std::exception_ptr takeError();

 private:
  [[noreturn]] void fail(const std::exception& error);
  [[nodiscard]] std::string waitingFor(const std::string& key) const;

  std::shared_ptr<StoreHandle> store_;
  std::string keyPrefix_;
  std::string groupName_;
  std::vector<int> globalRanks_;
  std::chrono::milliseconds timeout_;
  std::mutex errorMutex_;     // gloo may call in from its own threads
  std::exception_ptr error_;  // guarded by errorMutex_
};

}  // namespace dtrun::runtime::detail
