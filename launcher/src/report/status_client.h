// A client of a job's status endpoint (--status_port), for `dtrun top` and `dtrun stacks`: one
// GET over HTTP/1.1 within a deadline. Blocks; thread-compatible.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "dtrun/common.h"

namespace dtrun::launcher {

// "host:port" or "http://host:port[/...]" -> host and port; nullopt when not one.
std::optional<std::pair<std::string, std::string>> splitAddress(std::string text);

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// GET `target` at `address` (as splitAddress reads it), with the store token when not empty,
// within `timeout`: the answer, whatever its status; kInvalidArgument when `address` is not an
// address; kTimeout when no answer came in time; kConnection, naming the address and what to
// check, when it could not be reached.
Result<HttpAnswer> httpGet(const std::string& address, const std::string& target,
                           const std::string& token, std::chrono::milliseconds timeout);

}  // namespace dtrun::launcher
