// Connection set-up of the Tcp backend: every member listens on an ephemeral port, publishes
// "host:port" in the store under "<groupName>/addr/<rank>", connects to the lower ranks and
// accepts the higher ones. A handshake (magic, hash of the attempt prefix and group name, both
// ranks) turns away stray connections, e.g. from an earlier attempt of the job.
#pragma once

#include <vector>

#include "dtrun/common.h"

#include "communicator.h"

namespace dtrun::runtime::detail::tcp {

// Blocks until this rank has one connected socket (non-blocking, TCP_NODELAY) to every other
// member: result[r] for group rank r, invalid for this rank. Collective over the group. Throws
// TimeoutError naming the ranks that did not show up within config.timeout, CommError when a
// connection or the handshake fails.
std::vector<UniqueFd> connectMesh(const CommunicatorConfig& config);

}  // namespace dtrun::runtime::detail::tcp
