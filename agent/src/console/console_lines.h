// Cuts one worker's output stream into whole console lines: a line ends at '\n' or at '\r' (a
// progress bar redraws its line, so each redraw passes as a whole), each goes out behind the
// rank's prefix, and the unfinished rest waits for its end. A rest longer than the bound is
// split off as a line of its own, never dropped. Pure: the pump owns the timing and the writes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtrun::agent::detail {

class ConsoleLines {
 public:
  static constexpr std::size_t kMaxLine = std::size_t{64} * 1024;

  explicit ConsoleLines(std::string prefix, std::size_t maxLine = kMaxLine)
      : prefix_(std::move(prefix)), maxLine_(maxLine) {}

  // Appends to `out` every line `data` finishes, prefix first and its end ('\n' or '\r') kept.
  void feed(std::string_view data, std::string& out);
  // Appends the unfinished rest as a line of its own, ended by '\n' (a quiet stream, or its end).
  void flush(std::string& out);
  [[nodiscard]] bool pending() const { return !rest_.empty(); }
  [[nodiscard]] const std::string& prefix() const { return prefix_; }

 private:
  const std::string prefix_;
  const std::size_t maxLine_;
  std::string rest_;
  bool afterCr_ = false;  // the last line out ended the last read with '\r'
};

}  // namespace dtrun::agent::detail
