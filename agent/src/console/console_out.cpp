#include "console/console_out.h"

#include <cerrno>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd_io.h"

namespace dtrun::agent::detail {
namespace {

namespace asio = boost::asio;

// A description of our own for a pipe, FIFO or terminal, non-blocking; invalid where the console
// is something else (a file never blocks; a socket cannot be reopened) or cannot be reopened.
UniqueFd reopenNonBlocking(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !(S_ISFIFO(info.st_mode) || S_ISCHR(info.st_mode))) {
    return UniqueFd();
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  return UniqueFd(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
}

}  // namespace

ConsoleOut::ConsoleOut(asio::io_context& io) {
  for (const int fd : {1, 2}) {
    Stream& s = stream(fd);
    s.name = fd == 1 ? "stdout" : "stderr";
    s.own = reopenNonBlocking(fd);
    s.fd = s.own.valid() ? s.own.get() : fd;
    if (s.own.valid()) {
      // The watch only waits for writability; it never owns (or closes) the descriptor.
      s.watch = std::make_unique<asio::posix::stream_descriptor>(io, ::dup(s.own.get()));
    }
  }
}

ConsoleOut::~ConsoleOut() { *alive_ = false; }

void ConsoleOut::write(int fd, std::string_view bytes) {
  Stream& s = stream(fd);
  if (bytes.empty()) {
    return;
  }
  if (!s.own.valid()) {
    static_cast<void>(io::writeAll(s.fd, bytes));  // a closed console: dropped
    return;
  }
  if (s.pending.size() + bytes.size() > kMaxPending) {
    if (s.dropped == 0) {
      say(s, "dtrun: " + std::string(s.name) +
                 " is not being read: workers' output for it is dropped until it is (the log "
                 "files keep every byte)\n");
    }
    s.dropped += bytes.size();
    return;
  }
  s.pending.append(bytes);
  if (!s.waiting) {
    drain(s);
  }
}

void ConsoleOut::drain(Stream& s) {
  std::size_t done = 0;
  while (done < s.pending.size()) {
    const ssize_t n = ::write(s.fd, s.pending.data() + done, s.pending.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {  // the reader is gone (EPIPE) or the console broke: nothing will ever go out
      done = s.pending.size();
    }
  }
  s.pending.erase(0, done);
  if (!s.pending.empty()) {
    arm(s);
    return;
  }
  if (s.dropped > 0) {
    const std::size_t lost = s.dropped;
    s.dropped = 0;
    say(s, "dtrun: " + std::string(s.name) + " is read again; " + std::to_string(lost) +
               " bytes of workers' output were not shown there (see the log files)\n");
  }
}

void ConsoleOut::arm(Stream& s) {
  if (s.waiting) {
    return;
  }
  s.waiting = true;
  s.watch->async_wait(asio::posix::descriptor_base::wait_write,
                      [this, &s, alive = alive_](const boost::system::error_code& ec) {
                        if (!*alive) {
                          return;
                        }
                        s.waiting = false;
                        if (!ec) {
                          drain(s);
                        }
                      });
}

// A note about a stream goes to the other one (stderr's to stdout too: it may be read while
// stderr is not), through its own queue: it never blocks either.
void ConsoleOut::say(Stream& s, const std::string& note) {
  Stream& other = &s == &streams_[0] ? streams_[1] : streams_[0];
  if (other.own.valid() && other.pending.size() + note.size() > kMaxPending) {
    return;
  }
  if (!other.own.valid()) {
    static_cast<void>(io::writeAll(other.fd, note));
    return;
  }
  other.pending.append(note);
  if (!other.waiting) {
    drain(other);
  }
}

void ConsoleOut::flush(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (Stream& s : streams_) {
    while (!s.pending.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      pollfd p{s.fd, POLLOUT, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        s.pending.clear();  // the reader never came back: the log files have it all
        break;
      }
      const ssize_t n = ::write(s.fd, s.pending.data(), s.pending.size());
      if (n > 0) {
        s.pending.erase(0, static_cast<std::size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        s.pending.clear();
      }
    }
  }
}

}  // namespace dtrun::agent::detail
