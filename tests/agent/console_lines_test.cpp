// ConsoleLines: whole lines behind the prefix, '\r' redraws as lines, long rests split, the rest
// flushed as a line of its own. The end-to-end runs are tests/integration/console_lines_test.sh.
#include "console/console_lines.h"

#include <catch2/catch.hpp>

using dtrun::agent::detail::ConsoleLines;

TEST_CASE("only whole lines go out, each behind the prefix", "[unit][agent]") {
  ConsoleLines lines("[r1]:");
  std::string out;
  lines.feed("{\"loss\": 0.4", out);  // print() writes the text, then the newline
  CHECK(out.empty());
  CHECK(lines.pending());
  lines.feed("1}", out);
  lines.feed("\nnext line\nand a ", out);
  CHECK(out == "[r1]:{\"loss\": 0.41}\n[r1]:next line\n");
  out.clear();
  lines.flush(out);
  CHECK(out == "[r1]:and a \n");
  CHECK_FALSE(lines.pending());
  out.clear();
  lines.flush(out);  // nothing held: nothing written
  CHECK(out.empty());
}

TEST_CASE("a progress bar's carriage returns pass as whole redraws", "[unit][agent]") {
  ConsoleLines lines("");
  std::string out;
  lines.feed("\r 10%|#", out);
  lines.feed("  |\r 20%|##  |", out);
  CHECK(out == " 10%|#  |\r");  // the first '\r', at the line's start, is no line of its own
  out.clear();
  lines.feed("\r100%|####|\n", out);
  CHECK(out == " 20%|##  |\r100%|####|\n");
}

TEST_CASE("a line longer than the bound is split, never lost", "[unit][agent]") {
  ConsoleLines lines(">", 8);
  std::string out;
  lines.feed("0123456789abcdefghij", out);
  CHECK(out == ">01234567\n>89abcdef\n");
  out.clear();
  lines.feed("!\n", out);
  CHECK(out == ">ghij!\n");
}

TEST_CASE("CR LF in one read ends one line, not two", "[unit][agent]") {
  ConsoleLines lines("[r0]:");
  std::string out;
  lines.feed("dos line\r\nnext\r\nbar\rdone\n", out);
  CHECK(out == "[r0]:dos line\r\n[r0]:next\r\n[r0]:bar\r[r0]:done\n");
}

TEST_CASE("CR LF split across two reads still ends one line", "[unit][agent]") {
  ConsoleLines lines("[r0]:");
  std::string out;
  lines.feed("dos line\r", out);
  lines.feed("\nnext\r", out);
  lines.feed("redraw\n", out);
  CHECK(out == "[r0]:dos line\r\n[r0]:next\r[r0]:redraw\n");
}
