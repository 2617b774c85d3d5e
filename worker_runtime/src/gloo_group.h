// The Gloo backend's group (gloo_communicator.cpp has the overview): the Gloo context a
// communicator and its pending works share, connected through the store, and Gloo's exceptions
// turned into ours with the operation and the peer named.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "communicator.h"

namespace dtrun::runtime::detail {

// What a communicator and its pending isend/irecv works share: the Gloo context, and turning
// Gloo's exceptions into ours with the operation and the peer named.
class GlooGroup {
 public:
  GlooGroup(CommunicatorConfig config, std::shared_ptr<gloo::transport::Device> device)
      : config_(std::move(config)), device_(std::move(device)) {}

  // connectFullMesh through the store; throws TimeoutError naming a rank that never arrived.
  void connect(const std::string& op);

  [[nodiscard]] const CommunicatorConfig& config() const { return config_; }
  [[nodiscard]] const std::shared_ptr<gloo::transport::Device>& device() const { return device_; }
  [[nodiscard]] const std::shared_ptr<gloo::Context>& context() const { return context_; }

  // Runs fn (Gloo calls), translating Gloo's exceptions. `peers`: the ranks fn talks to, for the
  // message when Gloo's text does not name one; `timeout`: the limit fn waits with (0: the
  // group's).
  template <typename Fn>
  void run(const std::string& op, const std::vector<int>& peers, Fn&& fn,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    failIfBroken(op);
    try {
      std::forward<Fn>(fn)();
    } catch (const gloo::IoException& e) {
      raise(op, peers, e.what(), timeout);
    } catch (const gloo::Exception& e) {
      raise(op, peers, e.what(), timeout);
    } catch (const gloo::EnforceNotMet& e) {
      raise(op, peers, e.what(), timeout);
    }
  }

  [[nodiscard]] std::vector<int> otherRanks() const;

  // Throws CommError when an earlier failure (of this thread's call or a work's) broke the group.
  void failIfBroken(const std::string& op) const;

  [[nodiscard]] std::string describeRank(int rank) const;

  // Ring algorithms talk to the neighbours only (and `extra`, e.g. a root that gathers).
  [[nodiscard]] std::vector<int> ringNeighbours(int extra = -1) const;

  // Gloo's broadcast is a binomial tree over ranks renumbered so the root is 0: a non-root
  // receives from the virtual rank with its highest set bit cleared.
  [[nodiscard]] int broadcastParent(int root) const;

 private:
  [[nodiscard]] std::string describePeers(const std::vector<int>& peers) const;

  // Gloo names a peer by "[ip]:port", never by rank; map it back where it is one we know.
  [[nodiscard]] std::optional<int> peerNamedIn(const std::string& glooMessage) const;

  // After this rank's first failure: records it in the store, then closes every pair. Gloo has
  // no abort, so a peer blocked on this rank (a send it waits to complete) would otherwise wait
  // out its timeout; now it fails at once and reads here why (causeRecordedBy).
  void abandon(const std::string& why);
  // What `rank` recorded of its own failure; "" if nothing (or the store is busy: never waits).
  [[nodiscard]] std::string causeRecordedBy(int rank) const;
  [[nodiscard]] std::string failureKey(int rank) const;

  [[noreturn]] void raise(const std::string& op, const std::vector<int>& peers,
                          const std::string& glooMessage, std::chrono::milliseconds timeout);

  // Gloo's errors name a peer by the remote "[ip]:port" of that pair's connection, which is
  // usually the address the peer listens on for this rank (Pair::address()). Only the peer knows
  // it, so every rank publishes its list. (Sometimes Gloo names an address no rank published;
  // messages then list the ranks the operation talks to.)
  void learnPeerAddresses(gloo::Context& context, const std::string& op);

  [[noreturn]] void rethrowWithContext(const std::string& op, const std::exception_ptr& error);

  const CommunicatorConfig config_;
  const std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::map<std::string, int> peerAddresses_;
  mutable std::mutex mutex_;  // works may fail on other threads than the group's
  std::string brokenBy_;      // guarded by mutex_: the first failure, empty while healthy
};

}  // namespace dtrun::runtime::detail
