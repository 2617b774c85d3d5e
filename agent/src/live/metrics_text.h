// The job's state in Prometheus's text exposition format (version 0.0.4): one family per
// measure, `dtrun_` names, counters ending in `_total`, durations in `_seconds`, sizes in
// `_bytes`, fractions in `_ratio`, every sample labelled run_id and node (and rank, local_rank
// for a rank's). Pure; thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "live/node_status.h"

namespace dtrun::agent::detail {

// Every node's families, nodes in the order given. Content type: kMetricsContentType.
std::string metricsText(const std::vector<NodeStatus>& nodes);

inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// A label value as the format quotes it: backslash, double quote and newline escaped.
std::string escapeLabelValue(std::string_view value);

}  // namespace dtrun::agent::detail
