// PLACEHOLDER while the gloo backend is being written; replaced by its real implementation.
#include "communicator.h"

namespace dtrun::runtime::detail {

std::unique_ptr<Communicator> makeGlooCommunicator(const CommunicatorConfig& /*config*/) {
  throw ConfigError("the gloo backend is not implemented yet");
}

}  // namespace dtrun::runtime::detail
