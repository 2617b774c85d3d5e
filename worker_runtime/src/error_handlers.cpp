// TORCHELASTIC_ERROR_FILE writers: a std::terminate handler (uncaught exceptions), handlers for
// fatal signals, and recordError(). The file has torchrun's shape
//   {"message": {"message": "<Type>: <what>",
//                "extraInfo": {"py_callstack": "<backtrace, then the message>",
//                              "timestamp": "<epoch seconds>"}}}
// and is overwritten, as torchrun does. The agent quotes py_callstack (else message), so the
// callstack ends with the message, like a Python traceback.
//
// The signal handler runs in signal context: it uses only async-signal-safe calls (open, write,
// pipe2, read, close, clock_gettime, backtrace_symbols_fd, raise) and formats the JSON by hand
// into static buffers; the path and rank are captured at install time. backtrace() is called
// once at install time so that its lazy load of libgcc_s does not happen in the handler.
#include "error_handlers.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>

#include <cxxabi.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dtrun/runtime.h"

#include "fd_io.h"
#include "text.h"

namespace dtrun::runtime {
namespace {

constexpr int kMaxFrames = 64;
constexpr std::array kFatalSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// ---- state captured at install time, read-only afterwards (signal handler input) -------------

std::array<char, 4096> gErrorFile{};  // TORCHELASTIC_ERROR_FILE, empty = unset
std::array<char, 24> gRank{};         // RANK, or "?"
std::once_flag gInstallOnce;
std::terminate_handler gPreviousTerminate = nullptr;
// Set once an error file was written for an exception or by recordError(): the SIGABRT that
// std::abort() raises afterwards must not replace it with "Signal 6".
std::atomic<bool> gErrorRecorded{false};
// Set by the terminate handler: the SIGABRT of its std::abort() reports nothing more.
std::atomic<bool> gTerminating{false};
// Only the first fatal signal reports; a second one (another thread) just dies.
std::atomic<bool> gSignalReported{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used in a signal handler");

// Room for the handler to run after a stack overflow (the main thread's alternate stack).
alignas(16) std::array<char, std::size_t{64} * 1024> gAltStack{};

// ---- non-signal paths -------------------------------------------------------------------------

std::string demangle(const char* mangled) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? name.get() : mangled;
}

// "module(symbol+0x1f) [0xaddr]" -> "symbol'+0x1f (module) [0xaddr]" with the symbol demangled.
std::string describeFrame(const char* line) {
  const std::string_view text(line);
  const auto open = text.find('(');
  const auto close = text.find(')', open == std::string_view::npos ? 0 : open);
  if (open == std::string_view::npos || close == std::string_view::npos) {
    return std::string(text);
  }
  const std::string_view inside = text.substr(open + 1, close - open - 1);
  const auto plus = inside.rfind('+');
  const std::string symbol(inside.substr(0, plus == std::string_view::npos ? inside.size() : plus));
  if (symbol.empty()) {
    return std::string(text);  // no exported name: link with -rdynamic to see it
  }
  const std::string_view offset =
      plus == std::string_view::npos ? std::string_view{} : inside.substr(plus);
  return demangle(symbol.c_str()) + std::string(offset) + " in " +
         std::string(text.substr(0, open)) + std::string(text.substr(close + 1));
}

bool isRuntimeFrame(const char* line) {
  const std::string_view text(line);
  return text.find("libstdc++") != std::string_view::npos ||
         text.find("libgcc_s") != std::string_view::npos;
}

// The caller's stack, most recent call first, without the `skip` innermost frames and then
// without the C++ runtime's own frames on top (std::terminate, __cxa_throw).
std::string backtraceText(int skip) {
  std::array<void*, kMaxFrames> frames{};
  const int count = backtrace(frames.data(), kMaxFrames);
  const std::unique_ptr<char*, decltype(&std::free)> symbols(
      backtrace_symbols(frames.data(), count), &std::free);
  int first = std::min(skip, count);
  while (symbols && first < count - 1 && isRuntimeFrame(symbols.get()[first])) {
    ++first;
  }
  std::string out = "Traceback (most recent call first):\n";
  for (int i = first; i < count; ++i) {
    out += "  #" + std::to_string(i - first) + " ";
    out += symbols ? describeFrame(symbols.get()[i]) : "?";
    out += "\n";
  }
  return out;
}

std::string epochSeconds() {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
}

void writeErrorFile(const std::string& path, const std::string& message,
                    const std::string& callstack) {
  if (path.empty()) {
    return;
  }
  const nlohmann::json json = {
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", callstack}, {"timestamp", epochSeconds()}}}}}};
  std::ofstream out(path, std::ios::trunc);
  out << json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  gErrorRecorded.store(true);
}

std::string errorFilePath() {
  // Set at install time; recordError() may also run without init().
  return gErrorFile[0] != '\0' ? std::string(gErrorFile.data())
                               : text::envText("TORCHELASTIC_ERROR_FILE");
}

// "<ExceptionType>: <what()>" for the exception being handled, as torchrun writes it.
std::string describeCurrentException() {
  const std::exception_ptr current = std::current_exception();
  if (!current) {
    return "std::terminate called without an active exception";
  }
  const std::type_info* type = abi::__cxa_current_exception_type();
  std::string name = type != nullptr ? demangle(type->name()) : "unknown exception";
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& e) {
    return name + ": " + e.what();
  } catch (...) {
    return name + " (not derived from std::exception)";
  }
}

[[noreturn]] void onTerminate() {
  gTerminating.store(true);
  try {
    const std::string message = describeCurrentException();
    // Frames 0-1 are backtraceText and this handler; then std::terminate and the throw site.
    const std::string callstack = backtraceText(2) + message;
    writeErrorFile(errorFilePath(), message, callstack);
    const std::string forStderr = callstack + "\n";
    static_cast<void>(::write(STDERR_FILENO, forStderr.data(), forStderr.size()));
  } catch (...) {  // NOLINT(bugprone-empty-catch): nothing more can be reported
  }
  if (gPreviousTerminate != nullptr) {
    gPreviousTerminate();  // libstdc++'s prints "terminate called after throwing ..." and aborts
  }
  std::abort();
}

// ---- signal context: async-signal-safe only -------------------------------------------------

// Appends to a fixed buffer, truncating when full. No allocation.
class FixedWriter {
 public:
  FixedWriter(char* data, std::size_t capacity) : data_(data), capacity_(capacity) {}

  void raw(const char* text, std::size_t n) {
    for (std::size_t i = 0; i < n && size_ < capacity_; ++i) {
      data_[size_++] = text[i];
    }
  }
  void raw(const char* text) { raw(text, std::strlen(text)); }

  // JSON string content: escapes quotes, backslashes and control bytes; non-ASCII bytes become
  // '?' so a truncated UTF-8 sequence cannot make the file unparsable.
  void escaped(const char* text, std::size_t n) {
    static constexpr std::array<char, 16> kHex = {'0', '1', '2', '3', '4', '5', '6', '7',
                                                  '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (capacity_ - size_ < 8) {
        return;  // keep room for the closing characters
      }
      if (c == '"' || c == '\\') {
        const std::array<char, 2> pair = {'\\', static_cast<char>(c)};
        raw(pair.data(), pair.size());
      } else if (c == '\n') {
        raw("\\n", 2);
      } else if (c == '\t') {
        raw("\\t", 2);
      } else if (c < 0x20) {
        const std::array<char, 6> code = {'\\', 'u', '0', '0', kHex[c >> 4U], kHex[c & 0xFU]};
        raw(code.data(), code.size());
      } else if (c >= 0x80) {
        raw("?", 1);
      } else {
        const char plain = static_cast<char>(c);
        raw(&plain, 1);
      }
    }
  }
  void escaped(const char* text) { escaped(text, std::strlen(text)); }

  void number(long long value) {
    std::array<char, 24> digits{};
    std::size_t n = 0;
    const bool negative = value < 0;
    unsigned long long v = negative ? 0ULL - static_cast<unsigned long long>(value)
                                    : static_cast<unsigned long long>(value);
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0 && n < digits.size());
    if (negative) {
      raw("-", 1);
    }
    while (n > 0) {
      raw(&digits[--n], 1);
    }
  }

  [[nodiscard]] const char* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  char* data_;
  std::size_t capacity_;
  std::size_t size_ = 0;
};

// Static so the handler needs little stack (it may run on the small alternate stack).
std::array<char, 512> gSignalMessage{};
std::array<char, std::size_t{32} * 1024> gSymbols{};
std::array<char, std::size_t{96} * 1024> gJson{};
std::array<void*, kMaxFrames> gFrames{};

const char* signalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "unknown signal";
  }
}

// Async-signal-safe; a failed write to stderr or the error file has nowhere to be reported.
void writeAll(int fd, const char* data, std::size_t size) {
  static_cast<void>(io::writeAll(fd, data, size));
}

// backtrace_symbols_fd's text, captured through a pipe so it can be escaped into the JSON.
std::size_t symbolizeIntoBuffer(void* const* frames, int count) {
  std::array<int, 2> fds{-1, -1};
  if (::pipe2(fds.data(), O_CLOEXEC | O_NONBLOCK) != 0) {
    return 0;
  }
  backtrace_symbols_fd(frames, count, fds[1]);  // 64 frames fit a pipe's 64 KiB
  ::close(fds[1]);
  std::size_t size = 0;
  while (size < gSymbols.size()) {
    const ssize_t n = ::read(fds[0], gSymbols.data() + size, gSymbols.size() - size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    size += static_cast<std::size_t>(n);
  }
  ::close(fds[0]);
  return size;
}

void reportSignal(int sig) {
  FixedWriter message(gSignalMessage.data(), gSignalMessage.size() - 1);
  message.raw("Signal ");
  message.number(sig);
  message.raw(" (");
  message.raw(signalName(sig));
  message.raw(") received by rank ");
  message.raw(gRank.data());

  const int count = backtrace(gFrames.data(), kMaxFrames);
  // Frame 0 is this function; the kernel's signal trampoline and the faulting frame follow.
  void* const* frames = gFrames.data() + (count > 1 ? 1 : 0);
  const int shown = count > 1 ? count - 1 : count;

  static constexpr char kHeader[] = "Stack (most recent call first):\n";
  writeAll(STDERR_FILENO, message.data(), message.size());
  writeAll(STDERR_FILENO, "\n", 1);
  writeAll(STDERR_FILENO, kHeader, sizeof(kHeader) - 1);
  backtrace_symbols_fd(frames, shown, STDERR_FILENO);

  const bool skipFile = sig == SIGABRT && gErrorRecorded.load();
  if (gErrorFile[0] == '\0' || skipFile) {
    return;
  }
  const std::size_t symbols = symbolizeIntoBuffer(frames, shown);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);

  FixedWriter json(gJson.data(), gJson.size());
  json.raw(R"({"message": {"message": ")");
  json.escaped(message.data(), message.size());
  json.raw(R"(", "extraInfo": {"py_callstack": ")");
  json.escaped(kHeader);
  json.escaped(gSymbols.data(), symbols);
  json.escaped(message.data(), message.size());
  json.raw(R"(", "timestamp": ")");
  json.number(now.tv_sec);
  json.raw("\"}}}\n");

  const int fd = ::open(gErrorFile.data(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    writeAll(fd, json.data(), json.size());
    ::close(fd);
  }
}

void onFatalSignal(int sig, siginfo_t* /*info*/, void* /*context*/) {
  const int savedErrno = errno;
  if (!gSignalReported.exchange(true) && !(sig == SIGABRT && gTerminating.load())) {
    reportSignal(sig);
  }
  errno = savedErrno;
  // SA_RESETHAND restored the default action: the process dies of `sig` (exit status 128+sig)
  // when the handler returns, or right away if the signal is not blocked.
  static_cast<void>(::raise(sig));
}

void copyInto(std::span<char> target, const std::string& value) {
  if (value.size() + 1 > target.size()) {
    target[0] = '\0';
    return;
  }
  std::memcpy(target.data(), value.c_str(), value.size() + 1);
}

void install() {
  copyInto(gErrorFile, text::envText("TORCHELASTIC_ERROR_FILE"));
  const std::string rank = text::envText("RANK");
  copyInto(gRank, rank.empty() || rank.size() >= gRank.size() ? std::string("?") : rank);

  // Warm up backtrace(): its first call loads libgcc_s (malloc, dlopen), not signal-safe.
  std::array<void*, 2> warm{};
  static_cast<void>(backtrace(warm.data(), static_cast<int>(warm.size())));

  gPreviousTerminate = std::set_terminate(&onTerminate);

  // An alternate stack for this thread (only), unless the program set one: a stack overflow
  // leaves no room to run the handler on the normal stack.
  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
    stack_t alt{};
    alt.ss_sp = gAltStack.data();
    alt.ss_size = gAltStack.size();
    alt.ss_flags = 0;
    static_cast<void>(::sigaltstack(&alt, nullptr));
  }

  struct sigaction action {};
  action.sa_sigaction = &onFatalSignal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (const int sig : kFatalSignals) {
    static_cast<void>(::sigaction(sig, &action, nullptr));
  }
}

}  // namespace

namespace detail {

void installErrorHandlers() { std::call_once(gInstallOnce, install); }

}  // namespace detail

void recordError(const std::string& message) {
  // Frames 0-1 are backtraceText and recordError itself.
  writeErrorFile(errorFilePath(), message, backtraceText(2) + message);
}

}  // namespace dtrun::runtime
