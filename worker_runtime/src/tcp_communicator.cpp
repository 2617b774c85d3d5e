// PLACEHOLDER while the tcp backend is being written; replaced by its real implementation.
#include "communicator.h"

namespace dtrun::runtime::detail {

std::unique_ptr<Communicator> makeTcpCommunicator(const CommunicatorConfig& /*config*/) {
  throw ConfigError("the tcp backend is not implemented yet");
}

}  // namespace dtrun::runtime::detail
