#include "log.h"

#include <cstdlib>
#include <memory>
#include <mutex>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "dtrun/common.h"

namespace dtrun::log {
namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v";

spdlog::logger& component(const char* name) {
  // Loggers register themselves with spdlog so SPDLOG_LEVEL=rdzv=debug finds them by name.
  auto existing = spdlog::get(name);
  if (existing) {
    return *existing;
  }
  static std::mutex creationMutex;
  std::lock_guard<std::mutex> lock(creationMutex);
  existing = spdlog::get(name);
  if (existing) {
    return *existing;
  }
  std::shared_ptr<spdlog::logger> logger;
  try {
    logger = spdlog::stderr_color_mt(name);
  } catch (const spdlog::spdlog_ex&) {
    // Registered meanwhile by another copy of this file, which creationMutex does not cover:
    // libdtrt.so links its own, hidden, beside the one of a program (a test) that links common.
    return *spdlog::get(name);
  }
  logger->set_pattern(kPattern);
  logger->set_level(spdlog::level::warn);
  logger->flush_on(spdlog::level::warn);
  return *logger;
}

}  // namespace

spdlog::logger& rdzv() {
  static spdlog::logger& logger = component("rdzv");
  return logger;
}
spdlog::logger& agent() {
  static spdlog::logger& logger = component("agent");
  return logger;
}
spdlog::logger& launcher() {
  static spdlog::logger& logger = component("launcher");
  return logger;
}
spdlog::logger& runtime() {
  static spdlog::logger& logger = component("runtime");
  return logger;
}

void init(std::string_view level) {
  static std::once_flag once;
  std::call_once(once, [level] {
    std::string chosen(level);
    if (chosen.empty()) {
      const char* fromEnv =
          std::getenv("DTRUN_LOG_LEVEL");  // NOLINT(concurrency-mt-unsafe): before threads
      chosen = fromEnv != nullptr ? fromEnv : "info";
    }
    const auto parsed = spdlog::level::from_str(chosen);
    for (spdlog::logger* logger : {&rdzv(), &agent(), &launcher()}) {
      logger->set_level(parsed);
    }
    spdlog::cfg::load_env_levels();
  });
}

}  // namespace dtrun::log
