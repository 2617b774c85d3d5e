// Times as dtrun's files write them (the run report, the event log, health check results).
#pragma once

#include <chrono>
#include <string>

namespace dtrun {

// UTC, ISO 8601 with milliseconds: "2026-11-22T01:02:03.456Z".
std::string isoTime(std::chrono::system_clock::time_point time);

}  // namespace dtrun
