// Component loggers. Internal to dtrun (spdlog never appears in a public header).
#pragma once

#include <spdlog/spdlog.h>

namespace dtrun::log {

// Each returns a cached logger; it exists (at level warn) even when init() was never called, so
// library code can log from a program that did not set logging up.
spdlog::logger& rdzv();
spdlog::logger& agent();
spdlog::logger& launcher();
spdlog::logger& runtime();

}  // namespace dtrun::log
