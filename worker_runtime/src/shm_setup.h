// Which peers of a Tcp-backend group share this host, and the shared-memory links to them.
// Every member publishes its host identity in the store ("<groupName>/host/<rank>": boot id,
// hostname and mount namespace, or $DTRUN_HOST_ID); members with equal identities then set up one
// segment per pair over their already connected socket: the lower rank creates it and sends its
// path, the higher rank maps it and answers, the lower rank unlinks it (so a crash later leaves
// nothing behind). A pair where any step fails stays on TCP, with a one-line warning.
// DTRUN_TRANSPORT=tcp keeps every pair on TCP.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrun/common.h"

#include "communicator.h"
#include "shm_link.h"

namespace dtrun::runtime::detail::shm {

struct Topology {
  std::vector<std::unique_ptr<Link>> links;  // links[r]: to group rank r; nullptr: over TCP
  std::vector<int> host;                     // host[r]: hosts numbered by first appearance
  [[nodiscard]] int hostCount() const;
};

// Collective over the group, right after tcp::connectMesh: `fds` are its sockets (non-blocking),
// used here for the pairs' set-up messages only. Throws TimeoutError naming the rank that did not
// answer within config.timeout, CommError when a peer's connection closes, ConfigError for a bad
// DTRUN_TRANSPORT / DTRUN_HOST_ID / DTRUN_SHM_RING_BYTES.
Topology connectLinks(const CommunicatorConfig& config, const std::vector<UniqueFd>& fds);

// Where segments are created: $DTRUN_SHM_DIR, default /dev/shm.
std::string shmDir();

}  // namespace dtrun::runtime::detail::shm
