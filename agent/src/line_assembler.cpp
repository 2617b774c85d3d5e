#include "line_assembler.h"

#include <utility>

namespace dtrun::agent::detail {
namespace {

// One past the end of the first line of `data` (its terminator included), or npos when `data`
// ends inside a line. "\r\n" is one terminator when both bytes are there.
std::size_t lineEnd(std::string_view data) {
  const std::size_t i = data.find_first_of("\r\n");
  if (i == std::string_view::npos) {
    return i;
  }
  if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] == '\n') {
    return i + 2;
  }
  return i + 1;
}

}  // namespace

LineAssembler::LineAssembler(Sink sink, std::size_t maxLine)
    : sink_(std::move(sink)), maxLine_(maxLine == 0 ? 1 : maxLine) {}

void LineAssembler::feed(std::string_view data) {
  if (data.empty()) {
    return;
  }
  if (afterCr_ && data.front() == '\n') {
    sink_(Piece{data.substr(0, 1), false, true});
    data.remove_prefix(1);
  }
  afterCr_ = false;
  while (!data.empty()) {
    const std::size_t end = lineEnd(data);
    if (end == std::string_view::npos) {
      emitLine(data, false);
      return;
    }
    const bool endsWithCr = data[end - 1] == '\r';
    emitLine(data.substr(0, end), true);
    data.remove_prefix(end);
    // Whether a '\n' is coming cannot be known yet; the bar is shown now, its '\n' stays alone.
    afterCr_ = data.empty() && endsWithCr;
  }
}

// `rest` continues the held partial line; `complete`: it ends with the line's terminator.
void LineAssembler::emitLine(std::string_view rest, bool complete) {
  const bool inPartial = !partial_.empty();
  std::string_view line = rest;
  if (inPartial) {
    partial_.append(rest);
    line = partial_;
  }
  // A held line that reached the bound is cut too: a terminator could not join it any more.
  while (line.size() > maxLine_ || (!complete && line.size() >= maxLine_)) {
    sink_(Piece{line.substr(0, maxLine_), true, false});
    line.remove_prefix(maxLine_);
  }
  if (complete) {
    sink_(Piece{line, false, false});
    partial_.clear();
  } else if (inPartial) {
    partial_.erase(0, partial_.size() - line.size());
  } else {
    partial_.assign(line);
  }
}

void LineAssembler::flush() {
  afterCr_ = false;
  if (partial_.empty()) {
    return;
  }
  sink_(Piece{partial_, true, false});
  partial_.clear();
}

}  // namespace dtrun::agent::detail
