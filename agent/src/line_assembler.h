// Cuts one worker stream into console pieces: whole lines ("\n", or "\r" for progress bars), or,
// when the caller asks (a line held too long, the worker gone) or a line outgrows the bound, what
// is held so far. Pure; not thread-safe (one per stream, on the agent's event loop).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace dtrun::agent::detail {

class LineAssembler {
 public:
  // A longer line is cut into pieces of this size: memory stays bounded, nothing is lost.
  static constexpr std::size_t kMaxLine = std::size_t{64} * 1024;

  struct Piece {
    std::string_view text;  // terminator ('\n', '\r' or "\r\n") included when it has one
    // No terminator: flush() was called, or the line reached the bound. The rest of the line
    // comes in later pieces.
    bool cut = false;
    // Only "\n": the end of a "\r\n" whose '\r' ended the data of an earlier feed() and was
    // emitted with its line then.
    bool crlfTail = false;
  };
  // Receives every piece, in order; the text is valid only during the call.
  using Sink = std::function<void(const Piece&)>;

  explicit LineAssembler(Sink sink, std::size_t maxLine = kMaxLine);

  // Emits every line the data completes and holds the rest. A '\r' ends a line unless a '\n'
  // follows it; a '\r' that ends the data ends the line at once (a progress bar is shown now),
  // and a '\n' that then starts the next data is emitted alone as its crlfTail.
  void feed(std::string_view data);
  // Emits the held partial line, if any, as a cut piece.
  void flush();
  [[nodiscard]] bool holding() const { return !partial_.empty(); }

 private:
  void emitLine(std::string_view line, bool complete);

  Sink sink_;
  std::size_t maxLine_;
  std::string partial_;
  bool afterCr_ = false;  // the last data ended with a '\r' that ended a line
};

}  // namespace dtrun::agent::detail
