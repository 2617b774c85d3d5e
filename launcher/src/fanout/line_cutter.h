// Cuts one stream's bytes into whole lines for a console shared with other streams (the launch
// over ssh: one per host and stream): a line ends at '\n', '\r\n' or '\r' (a progress bar's
// redraw); an unfinished line waits for its end, or goes out alone when flushed (quiet, or the
// stream's end); a line longer than kMaxLine is cut there, never dropped. Not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

class LineCutter {
 public:
  static constexpr std::size_t kMaxLine = std::size_t{64} * 1024;

  // The lines `bytes` completed, each with its end ("\n" or "\r"; a cut long line gets "\n").
  std::vector<std::string> feed(std::string_view bytes);
  // The unfinished line with "\n" added, or nothing; the cutter is empty afterwards.
  std::vector<std::string> flush();
  // Whether an unfinished line is held.
  [[nodiscard]] bool holding() const { return !held_.empty() || pendingCr_; }

 private:
  std::string held_;
  bool pendingCr_ = false;  // the last byte was '\r': "\r\n" across two reads is one end
};

}  // namespace dtrun::launcher
