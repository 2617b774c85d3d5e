#include "console/collapsed_console.h"

#include <string>

namespace dtrun::agent::detail {

void writeCollapsed(ConsoleOut& console, const std::vector<CollapsedLine>& lines) {
  std::string batch;
  int fd = 1;
  const auto flush = [&] {
    if (!batch.empty()) {
      console.write(fd, batch);
      batch.clear();
    }
  };
  for (const auto& line : lines) {
    const int lineFd = line.stream == ConsoleStream::kOut ? 1 : 2;
    if (lineFd != fd) {
      flush();
      fd = lineFd;
    }
    batch += collapsedPrefix(line.ranks);
    batch += line.text;
  }
  flush();
}

CollapsedConsole::CollapsedConsole(boost::asio::io_context& io, std::shared_ptr<ConsoleOut> console,
                                   std::chrono::milliseconds window)
    : timer_(io), console_(std::move(console)), collapse_(window, 0) {}

CollapsedConsole::~CollapsedConsole() {
  *alive_ = false;
  flushAll();
}

void CollapsedConsole::lines(ConsoleStream stream, int rank, std::string_view text) {
  const auto now = ConsoleCollapse::Clock::now();
  const int ranks[] = {rank};
  while (!text.empty()) {
    std::size_t end = text.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      end = text.size() - 1;  // ConsoleLines hands whole lines only; a rest is kept as a line
    } else if (text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n') {
      ++end;
    }
    collapse_.add(stream, ranks, text.substr(0, end + 1), now);
    text.remove_prefix(end + 1);
  }
  takeReady();
}

void CollapsedConsole::group(ConsoleStream stream, std::span<const int> ranks,
                             std::string_view text, std::chrono::milliseconds age) {
  collapse_.add(stream, ranks, text, ConsoleCollapse::Clock::now() - age);
  takeReady();
}

void CollapsedConsole::flushAll() { emit(collapse_.takeAll()); }

void CollapsedConsole::emit(std::vector<CollapsedLine> ready) {
  if (ready.empty()) {
    return;
  }
  if (sink_) {
    sink_(std::move(ready));
  } else {
    writeCollapsed(*console_, ready);
  }
}

void CollapsedConsole::takeReady() {
  emit(collapse_.take(ConsoleCollapse::Clock::now()));
  arm();
}

// One timer, set for the front group's deadline; when it fires for a group that left since,
// it is set again for the group in front now.
void CollapsedConsole::arm() {
  const auto deadline = collapse_.nextDeadline();
  if (!deadline || (armed_ && *deadline >= armedFor_)) {
    return;
  }
  armed_ = true;
  armedFor_ = *deadline;
  timer_.expires_at(*deadline);  // cancels a later wait: its handler sees the error
  timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) {
      return;
    }
    armed_ = false;
    takeReady();
  });
}

}  // namespace dtrun::agent::detail
