#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>
#include <utility>

#include <sys/resource.h>

#include "dtrun/common.h"

namespace dtrun {

std::string_view errcName(Errc code) {
  switch (code) {
    case Errc::kOk:
      return "ok";
    case Errc::kTimeout:
      return "timeout";
    case Errc::kConnection:
      return "connection error";
    case Errc::kProtocol:
      return "protocol error";
    case Errc::kNotFound:
      return "not found";
    case Errc::kInvalidArgument:
      return "invalid argument";
    case Errc::kSystem:
      return "system error";
    case Errc::kCancelled:
      return "cancelled";
    case Errc::kDenied:
      return "denied";
  }
  return "unknown error";
}

std::string systemErrorText(int err) {
  std::string message = std::system_category().message(err);
  // Out of file descriptors: what the limit is and how to raise it, wherever it struck.
  if (err == EMFILE) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      message += " (this process may open " + std::to_string(limit.rlim_cur) +
                 " files, RLIMIT_NOFILE: raise it with ulimit -n, up to the hard limit " +
                 (limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                  : std::to_string(limit.rlim_max)) +
                 ")";
    }
  } else if (err == ENFILE) {
    message += " (the system's open files are at their limit: raise fs.file-max)";
  }
  return message;
}

Status Status::system(std::string_view what, int err) {
  return {Errc::kSystem, std::string(what) + ": " + systemErrorText(err)};
}

std::string Status::toString() const {
  if (isOk()) {
    return "ok";
  }
  return std::string(errcName(code_)) + ": " + message_;
}

Status Status::withContext(std::string_view context) const {
  if (isOk()) {
    return *this;
  }
  return {code_, std::string(context) + ": " + message_};
}

namespace detail {
void checkFailed(const char* expression, const char* file, int line, std::string_view message) {
  // stdio, not the loggers: a broken invariant may be the loggers' own.
  static_cast<void>(std::fprintf(stderr, "dtrun: internal error: %s:%d: CHECK(%s) failed: %.*s\n",
                                 file, line, expression, static_cast<int>(message.size()),
                                 message.data()));
  std::abort();
}
}  // namespace detail

}  // namespace dtrun
