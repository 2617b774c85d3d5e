// PLACEHOLDER while the nccl backend is being written; replaced by its real implementation.
#include "communicator.h"

namespace dtrun::runtime::detail {

std::unique_ptr<Communicator> makeNcclCommunicator(const CommunicatorConfig& /*config*/) {
  throw ConfigError("the nccl backend is not implemented yet");
}

}  // namespace dtrun::runtime::detail
