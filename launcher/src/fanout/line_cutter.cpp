#include "fanout/line_cutter.h"

namespace dtrun::launcher {

std::vector<std::string> LineCutter::feed(std::string_view bytes) {
  std::vector<std::string> lines;
  for (const char c : bytes) {
    if (pendingCr_) {
      pendingCr_ = false;
      if (c == '\n') {
        lines.push_back(held_ + "\n");
        held_.clear();
        continue;
      }
      lines.push_back(held_ + "\r");
      held_.clear();
    }
    if (c == '\n') {
      lines.push_back(held_ + "\n");
      held_.clear();
    } else if (c == '\r') {
      pendingCr_ = true;
    } else {
      held_ += c;
      if (held_.size() >= kMaxLine) {
        lines.push_back(held_ + "\n");
        held_.clear();
      }
    }
  }
  return lines;
}

std::vector<std::string> LineCutter::flush() {
  if (!holding()) {
    return {};
  }
  std::string line = held_ + (pendingCr_ ? "\r" : "\n");
  held_.clear();
  pendingCr_ = false;
  return {line};
}

}  // namespace dtrun::launcher
