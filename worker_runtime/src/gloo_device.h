// Creating the Gloo TCP device: choosing the local address peers can reach.
#pragma once

#include <memory>

#include <gloo/transport/device.h>

namespace dtrun::runtime::detail {

// A TCP device listening on the address peers can reach: GLOO_SOCKET_IFNAME's interface when set
// (torch's knob), 127.0.0.1 when the store (MASTER_ADDR) is on loopback, otherwise the local
// address that routes to the store. Throws CommError if Gloo cannot bind it.
std::shared_ptr<gloo::transport::Device> makeGlooDevice();

}  // namespace dtrun::runtime::detail
