// The console's line assembly: whole lines out of arbitrary chunks, '\r' progress bars, "\r\n"
// split between reads, the bound on a line, and what flush() gives up. Pure: no pipe, no clock.
#include "line_assembler.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace {

using dtrun::agent::detail::LineAssembler;

// Each piece as text, with "|cut" or "|crlf" appended for its flags.
struct Recorder {
  std::vector<std::string> pieces;
  LineAssembler assembler;
  explicit Recorder(std::size_t maxLine = LineAssembler::kMaxLine)
      : assembler(
            [this](const LineAssembler::Piece& piece) {
              std::string text(piece.text);
              if (piece.cut) {
                text += "|cut";
              }
              if (piece.crlfTail) {
                text += "|crlf";
              }
              pieces.push_back(text);
            },
            maxLine) {}
};

using Pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("lines arriving whole leave one piece each", "[unit][agent][console]") {
  Recorder r;
  r.assembler.feed("a\nbc\n\nd\n");
  CHECK(r.pieces == Pieces{"a\n", "bc\n", "\n", "d\n"});
  CHECK_FALSE(r.assembler.holding());
}

TEST_CASE("a line written in pieces leaves whole, whatever the cuts", "[unit][agent][console]") {
  Recorder r;
  r.assembler.feed("{\"rank\": 1, ");
  r.assembler.feed("\"loss\": 0.5}");
  CHECK(r.pieces.empty());
  CHECK(r.assembler.holding());
  r.assembler.feed("\nnext");  // python -u writes the text and the "\n" apart
  CHECK(r.pieces == Pieces{"{\"rank\": 1, \"loss\": 0.5}\n"});
  r.assembler.feed(" line\n");
  CHECK(r.pieces == Pieces{"{\"rank\": 1, \"loss\": 0.5}\n", "next line\n"});
  CHECK_FALSE(r.assembler.holding());
}

TEST_CASE("every byte once, in order, for any chunking", "[unit][agent][console]") {
  const std::string text = "one\ntwo two\r\nthree\rfour\n\n\rfive";
  const std::size_t step = GENERATE(1, 2, 3, 5, 7, 100);
  Recorder r;
  for (std::size_t i = 0; i < text.size(); i += step) {
    r.assembler.feed(std::string_view(text).substr(i, step));
  }
  r.assembler.flush();
  std::string joined;
  for (std::string piece : r.pieces) {
    for (const std::string flag : {"|cut", "|crlf"}) {
      if (piece.ends_with(flag)) {
        piece.resize(piece.size() - flag.size());
      }
    }
    joined += piece;
  }
  CHECK(joined == text);
}

TEST_CASE("a carriage return ends a progress bar's piece", "[unit][agent][console]") {
  Recorder r;
  r.assembler.feed("\r 10%|#    |\r 20%|##   |");
  CHECK(r.pieces == Pieces{"\r", " 10%|#    |\r"});
  r.assembler.feed("\r100%|#####|\n");
  CHECK(r.pieces == Pieces{"\r", " 10%|#    |\r", " 20%|##   |\r", "100%|#####|\n"});
}

TEST_CASE("a chunk ending in a carriage return is shown at once", "[unit][agent][console]") {
  Recorder r;
  r.assembler.feed("step 3/10\r");
  CHECK(r.pieces == Pieces{"step 3/10\r"});
  CHECK_FALSE(r.assembler.holding());

  SECTION("a newline first in the next chunk completes it alone") {
    r.assembler.feed("\nafter\n");
    CHECK(r.pieces == Pieces{"step 3/10\r", "\n|crlf", "after\n"});
  }
  SECTION("anything else starts a new piece") {
    r.assembler.feed("step 4/10\r");
    CHECK(r.pieces == Pieces{"step 3/10\r", "step 4/10\r"});
  }
  SECTION("a newline after other text is an ordinary line end") {
    r.assembler.feed("x\n\n");
    CHECK(r.pieces == Pieces{"step 3/10\r", "x\n", "\n"});
  }
}

TEST_CASE("\\r\\n inside one chunk is one terminator", "[unit][agent][console]") {
  Recorder r;
  r.assembler.feed("dos line\r\nnext\r\n");
  CHECK(r.pieces == Pieces{"dos line\r\n", "next\r\n"});
}

TEST_CASE("flush() gives up the held partial line as a cut piece", "[unit][agent][console]") {
  Recorder r;
  r.assembler.flush();
  CHECK(r.pieces.empty());
  r.assembler.feed("x? ");
  r.assembler.flush();
  CHECK(r.pieces == Pieces{"x? |cut"});
  CHECK_FALSE(r.assembler.holding());
  r.assembler.feed("yes\n");
  CHECK(r.pieces == Pieces{"x? |cut", "yes\n"});
}

TEST_CASE("a line over the bound is cut into bounded pieces, nothing lost",
          "[unit][agent][console]") {
  Recorder r(8);
  SECTION("arriving whole") {
    r.assembler.feed("0123456789abcdefXYZ\n");
    CHECK(r.pieces == Pieces{"01234567|cut", "89abcdef|cut", "XYZ\n"});
  }
  SECTION("arriving in pieces: a held line is cut once it reaches the bound") {
    r.assembler.feed("0123");
    r.assembler.feed("4567");
    CHECK(r.pieces == Pieces{"01234567|cut"});
    CHECK_FALSE(r.assembler.holding());
    r.assembler.feed("89abcdefXY");
    CHECK(r.pieces == Pieces{"01234567|cut", "89abcdef|cut"});
    r.assembler.feed("Z\n");
    CHECK(r.pieces == Pieces{"01234567|cut", "89abcdef|cut", "XYZ\n"});
  }
  SECTION("a line of exactly the bound, terminator included, is whole") {
    r.assembler.feed("0123456\n");
    CHECK(r.pieces == Pieces{"0123456\n"});
  }
}
