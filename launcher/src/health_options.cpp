#include "health_options.h"

#include <chrono>
#include <cmath>
#include <cstdint>

#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {

using text::trim;

// --health_checks, --health_check_timeout, --health_min_free_mb, --health_min_open_files,
// --health_gpu_memory_wait, --health_net_min_gbps, --health_net_max_rtt_us.
Status resolveHealthChecks(const Resolver& options, const HostFacts& host,
                           agent::HealthChecks& checks) {
  const auto list = options.get("health_checks", "local");
  checks = agent::HealthChecks{};
  checks.logDir = checks.entrypoint = checks.store = checks.gpus = checks.openFiles = false;
  const auto names = text::split(list.text, ',');
  for (const auto name : names) {
    const std::string_view n = trim(name);
    if (n == "none" && names.size() == 1) {
      continue;
    }
    if (n == "local") {
      checks.logDir = checks.entrypoint = checks.store = checks.gpus = checks.openFiles = true;
    } else if (n == "log_dir") {
      checks.logDir = true;
    } else if (n == "entrypoint") {
      checks.entrypoint = true;
    } else if (n == "store") {
      checks.store = true;
    } else if (n == "gpus") {
      checks.gpus = true;
    } else if (n == "open_files") {
      checks.openFiles = true;
    } else if (n == "network") {
      checks.network = true;
    } else {
      return expected(
          list,
          "a comma list of local, log_dir, entrypoint, store, gpus, open_files, network, "
          "or none");
    }
  }
  if (checks.network) {
    if (host.netcheckProgram.empty()) {
      return Status::invalidArgument(
          "--health_checks=" + list.text +
          ": dtrun-netcheck (the network check's program) is not installed beside this dtrun: "
          "reinstall dtrun, or drop 'network'");
    }
    checks.netcheckProgram = host.netcheckProgram;
  }
  const auto minGbps = options.get("health_net_min_gbps", "1");
  const auto gbps = parseNumber(minGbps.text);
  if (!gbps || *gbps < 0 || *gbps > 1e6) {
    return expected(minGbps, "a non-negative number of Gbit/s (0 = not checked)");
  }
  checks.netMinGbps = *gbps;
  const auto maxRtt = options.get("health_net_max_rtt_us", "10000");
  const auto rtt = parseNumber(maxRtt.text);
  if (!rtt || *rtt < 0 || *rtt > 1e9) {
    return expected(maxRtt, "a non-negative number of microseconds (0 = not checked)");
  }
  checks.netMaxRttUs = *rtt;
  // NVML: the driver's library, or the one DTRUN_NVML_LIBRARY names (a driver outside the
  // loader's path; the tests' fake NVML).
  if (const auto nvml = options.env("DTRUN_NVML_LIBRARY"); nvml && !nvml->empty()) {
    checks.nvmlLibrary = *nvml;
  } else if (options.env("DTRUN_SYSFS_ROOT")) {
    // A recorded machine (the placement tests) plans GPUs this one lacks; a fake NVML that
    // describes them is what checks them.
    checks.gpus = false;
  }
  const auto timeout = options.get("health_check_timeout", "5");
  const auto seconds = parseNumber(timeout.text);
  if (!seconds || *seconds <= 0 || *seconds > kMaxDurationSeconds) {
    return expected(timeout, "a positive number of seconds");
  }
  checks.timeout = std::chrono::milliseconds(std::llround(*seconds * 1000.0));
  const auto freeSetting = options.get("health_min_free_mb", "100");
  const auto mib = parseNumber(freeSetting.text);
  if (!mib || *mib < 0 || *mib > 1e9) {
    return expected(freeSetting, "a non-negative number of MiB (0 = any free space)");
  }
  checks.minFreeBytes = static_cast<std::uint64_t>(std::llround(*mib * 1024.0 * 1024.0));
  const auto openFiles = options.get("health_min_open_files", "1024");
  const auto files = parseNumber(openFiles.text);
  if (!files || *files < 0 || *files > 1e9 || *files != std::floor(*files)) {
    return expected(openFiles, "a whole number of files (0 = not checked)");
  }
  checks.minOpenFiles = static_cast<std::uint64_t>(*files);
  const auto gpuWait = options.get("health_gpu_memory_wait", "30");
  const auto gpuSeconds = parseNumber(gpuWait.text);
  if (!gpuSeconds || *gpuSeconds < 0 || *gpuSeconds > kMaxDurationSeconds) {
    return expected(gpuWait, "a non-negative number of seconds (0 = no wait)");
  }
  checks.gpuMemoryWait = std::chrono::milliseconds(std::llround(*gpuSeconds * 1000.0));
  return Status::ok();
}

}  // namespace dtrun::launcher
