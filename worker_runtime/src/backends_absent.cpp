// The Gloo and NCCL factories of dtrun::runtime_tcp, the Tcp-only libdtrt that dtrun's own
// programs link (worker_runtime/CMakeLists.txt says why): asking for either is a ConfigError.
// (scripts/tidy.sh: a unit of its own, as it defines what gloo_communicator.cpp defines.)
#include <memory>

#include "dtrun/runtime.h"

#include "communicator.h"

namespace dtrun::runtime::detail {

std::unique_ptr<Communicator> makeGlooCommunicator(const CommunicatorConfig& /*config*/) {
  throw ConfigError("this program is built with libdtrt's Tcp backend only (no Gloo)");
}

std::unique_ptr<Communicator> makeNcclCommunicator(const CommunicatorConfig& /*config*/) {
  throw ConfigError("this program is built with libdtrt's Tcp backend only (no NCCL)");
}

}  // namespace dtrun::runtime::detail
