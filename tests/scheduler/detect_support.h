// The scheduler tests' way into detect(): what it finds in a made-up job's environment, or the
// one line it refuses it with.
#pragma once

#include <string>

#include <catch2/catch.hpp>

#include "dtrun/scheduler.h"

namespace dtrun::testing {

inline scheduler::Allocation detected(const scheduler::JobEnvironment& job,
                                      scheduler::Mode mode = scheduler::Mode::kAuto) {
  auto found = scheduler::detect(mode, job);
  INFO(found.status().message());
  REQUIRE(found.isOk());
  REQUIRE(found.value().has_value());
  return *found.value();
}

inline std::string errorOf(const scheduler::JobEnvironment& job,
                           scheduler::Mode mode = scheduler::Mode::kAuto) {
  auto found = scheduler::detect(mode, job);
  REQUIRE_FALSE(found.isOk());
  std::string message = found.status().message();
  CHECK(message.find('\n') == std::string::npos);  // one line
  return message;
}

inline bool contains(const std::string& text, const std::string& part) {
  INFO(text);
  return text.find(part) != std::string::npos;
}

}  // namespace dtrun::testing
