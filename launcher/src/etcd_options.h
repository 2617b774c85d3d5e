// --rdzv_backend=etcd (torchrun's name; etcd-v3 is the same): etcd's client URLs from
// --rdzv_endpoint and the connection settings from --rdzv_conf (prefix, TLS, auth, lease).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/agent.h"
#include "dtrun/common.h"

namespace dtrun::launcher {

// Whether `backend` names the etcd backend ("etcd", "etcd-v3").
[[nodiscard]] bool isEtcdBackend(std::string_view backend);

// The --rdzv_conf keys resolveEtcd reads (the multi-node code skips them).
[[nodiscard]] bool isEtcdConfKey(std::string_view key);

// `endpoints`: --rdzv_endpoint's text, "host:port[,host:port...]" (http:// or https:// allowed).
// `env`: where a password may come from (DTRUN_ETCD_PASSWORD). The job's prefix is the conf's
// prefix (default "/dtrun") + "/" + runId + "/".
[[nodiscard]] Result<agent::EtcdRendezvous> resolveEtcd(
    const std::string& endpoints, const std::vector<std::pair<std::string, std::string>>& conf,
    const std::string& runId, const std::string& passwordFromEnv);

}  // namespace dtrun::launcher
