// Shared vocabulary of every dtrun component: Status/Result for expected failures (with DTRUN_TRY,
// DTRUN_ASSIGN_OR_RETURN and the invariant DTRUN_CHECK), UniqueFd for
// owned descriptors, jittered Backoff for retries, and logging set-up. Everything here is a value
// type; none of it is thread-safe beyond what a value type is (copy freely, share nothing).
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dtrun {

enum class Errc : std::uint8_t {
  kOk,
  kTimeout,
  kConnection,
  kProtocol,
  kNotFound,
  kInvalidArgument,
  kSystem,
  kCancelled,
  kDenied,  // the peer refused us (e.g. a wrong store token): retrying cannot help
};

std::string_view errcName(Errc code);

// errno's text, and where it is a limit that was reached (out of file descriptors), which limit and
// how to raise it: what dtrun's errors say after the failed call.
std::string systemErrorText(int err);

// Outcome of an operation that can fail in an expected way. The message names the operation, the
// peer and how far it got, e.g. "connect(10.1.2.3:29500): Connection refused (12 attempts
// over 30.0s)".
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return {}; }
  static Status error(Errc code, std::string message) { return Status(code, std::move(message)); }
  static Status timeout(std::string message) { return {Errc::kTimeout, std::move(message)}; }
  static Status connection(std::string message) { return {Errc::kConnection, std::move(message)}; }
  static Status protocol(std::string message) { return {Errc::kProtocol, std::move(message)}; }
  static Status invalidArgument(std::string message) {
    return {Errc::kInvalidArgument, std::move(message)};
  }
  // `what` names the call and its target; systemErrorText(err) is appended.
  static Status system(std::string_view what, int err);

  [[nodiscard]] bool isOk() const { return code_ == Errc::kOk; }
  [[nodiscard]] Errc code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }
  // "timeout: wait([k]) on 127.0.0.1:5: ..." (or "ok").
  [[nodiscard]] std::string toString() const;
  // The same status with `context` put in front of the message.
  [[nodiscard]] Status withContext(std::string_view context) const;

 private:
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  Errc code_ = Errc::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool isOk() const { return std::holds_alternative<T>(state_); }
  [[nodiscard]] const T& value() const& { return std::get<T>(state_); }
  [[nodiscard]] T& value() & { return std::get<T>(state_); }
  [[nodiscard]] T&& value() && { return std::get<T>(std::move(state_)); }
  [[nodiscard]] Status status() const { return isOk() ? Status::ok() : std::get<Status>(state_); }

 private:
  std::variant<T, Status> state_;
};

namespace detail {
inline Status statusOf(Status status) { return status; }
template <typename T>
Status statusOf(const Result<T>& result) {
  return result.status();
}
// Prints "dtrun: internal error: <file>:<line>: CHECK(<expr>) failed: <message>" and aborts.
[[noreturn]] void checkFailed(const char* expression, const char* file, int line,
                              std::string_view message);
}  // namespace detail

// Error propagation. DTRUN_TRY(expr) returns expr's Status from the enclosing function when it is
// not ok (expr is a Status or a Result<T>); DTRUN_ASSIGN_OR_RETURN(decl, expr) does the same for a
// Result<T> and otherwise moves its value into `decl` ("auto x", "int y", or an existing lvalue).
// The enclosing function returns Status or any Result<U>.
#define DTRUN_CONCAT_INNER(a, b) a##b
#define DTRUN_CONCAT(a, b) DTRUN_CONCAT_INNER(a, b)

#define DTRUN_TRY(expr)                                                   \
  do {                                                                    \
    if (::dtrun::Status dtrunTryStatus = ::dtrun::detail::statusOf(expr); \
        !dtrunTryStatus.isOk()) {                                         \
      return dtrunTryStatus;                                              \
    }                                                                     \
  } while (false)

#define DTRUN_ASSIGN_OR_RETURN(decl, expr) \
  DTRUN_ASSIGN_OR_RETURN_IMPL(DTRUN_CONCAT(dtrunResult, __LINE__), decl, expr)
// `decl` is a declaration and `result` a name: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define DTRUN_ASSIGN_OR_RETURN_IMPL(result, decl, expr) \
  auto result = (expr);                                 \
  if (!result.isOk()) {                                 \
    return result.status();                             \
  }                                                     \
  decl = std::move(result).value()
// NOLINTEND(bugprone-macro-parentheses)

// An invariant of dtrun's own code (never of input): when it does not hold, the program is wrong,
// and continuing would only hide where. Logs the expression and `message`, then aborts.
#define DTRUN_CHECK(condition, message)                                      \
  do {                                                                       \
    if (!(condition)) {                                                      \
      ::dtrun::detail::checkFailed(#condition, __FILE__, __LINE__, message); \
    }                                                                        \
  } while (false)

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Exponential backoff with jitter, after c10d's ExponentialBackoffWithJitter: each delay is the
// current interval scaled by a random factor in [1 - randomization, 1 + randomization], and the
// interval grows by `multiplier` up to `maxInterval`. randomization = 0 makes it deterministic.
class Backoff {
 public:
  struct Options {
    std::chrono::milliseconds initialInterval{10};
    std::chrono::milliseconds maxInterval{1000};
    double multiplier = 1.5;
    double randomization = 0.5;
  };

  Backoff() : Backoff(Options{}) {}
  explicit Backoff(Options options);
  std::chrono::milliseconds nextDelay();

 private:
  Options options_;
  double currentMs_;
  std::minstd_rand rng_;
};

namespace log {
// Sets up one stderr logger per component (launcher, agent, rdzv, runtime). The level comes from
// `level` if non-empty, else DTRUN_LOG_LEVEL, else "info"; SPDLOG_LEVEL may refine per logger.
// Call once from main() before any thread starts; safe to call again (later calls do nothing).
void init(std::string_view level = {});
}  // namespace log

}  // namespace dtrun
