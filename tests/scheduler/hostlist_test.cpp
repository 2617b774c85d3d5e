// SLURM's host list and count grammars: what scontrol show hostnames prints, and malformed lists.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/scheduler.h"

namespace {

using dtrun::scheduler::expandCounts;
using dtrun::scheduler::expandHostlist;
using Hosts = std::vector<std::string>;

Hosts expanded(const std::string& text) {
  auto hosts = expandHostlist(text);
  INFO(text << ": " << hosts.status().message());
  REQUIRE(hosts.isOk());
  return hosts.value();
}

std::string errorOf(const std::string& text) {
  auto hosts = expandHostlist(text);
  INFO(text);
  REQUIRE_FALSE(hosts.isOk());
  return hosts.status().message();
}

}  // namespace

TEST_CASE("host lists expand as scontrol show hostnames does", "[unit][scheduler]") {
  CHECK(expanded("node1") == Hosts{"node1"});
  CHECK(expanded("node[1-3]") == Hosts{"node1", "node2", "node3"});
  CHECK(expanded("node[1,3]") == Hosts{"node1", "node3"});
  // Each entry keeps its own width, as scontrol: "7" is not padded to the width of "01".
  CHECK(expanded("a[01-03,7]b") == Hosts{"a01b", "a02b", "a03b", "a7b"});
  CHECK(expanded("a[01-03,07]b") == Hosts{"a01b", "a02b", "a03b", "a07b"});
  CHECK(expanded("gnode[10,20,25,37]") == Hosts{"gnode10", "gnode20", "gnode25", "gnode37"});
  CHECK(expanded("node[1-2],ctl") == Hosts{"node1", "node2", "ctl"});
  CHECK(expanded("a[01-02],b,c[9-10]") == Hosts{"a01", "a02", "b", "c9", "c10"});
  CHECK(expanded("gpu-node-[1-2]") == Hosts{"gpu-node-1", "gpu-node-2"});
  CHECK(expanded("n[5]") == Hosts{"n5"});
  CHECK(expanded("  node[1-2]\n") == Hosts{"node1", "node2"});  // blanks around the list
  // Order and duplicates are kept: the list's order is the node order.
  CHECK(expanded("b,a,b") == Hosts{"b", "a", "b"});
}

TEST_CASE("zero padding follows the range's lower bound", "[unit][scheduler]") {
  CHECK(expanded("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(expanded("n[001-003]") == Hosts{"n001", "n002", "n003"});
  CHECK(expanded("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expanded("n[9-10]") == Hosts{"n9", "n10"});
  CHECK(expanded("n[0-1]") == Hosts{"n0", "n1"});
}

TEST_CASE("several bracket groups form a cartesian product, left group outermost",
          "[unit][scheduler]") {
  CHECK(expanded("r[1-2]n[01-02]") == Hosts{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expanded("r[1-2]-n[1,3]-ib") == Hosts{"r1-n1-ib", "r1-n3-ib", "r2-n1-ib", "r2-n3-ib"});
  CHECK(expanded("x[1-2]y[1-2]z[7],w") == Hosts{"x1y1z7", "x1y2z7", "x2y1z7", "x2y2z7", "w"});
}

TEST_CASE("large lists expand fully and stay bounded", "[unit][scheduler]") {
  const auto hosts = expanded("n[0001-4096]");
  REQUIRE(hosts.size() == 4096);
  CHECK(hosts.front() == "n0001");
  CHECK(hosts.back() == "n4096");
  CHECK(errorOf("n[0-999999999]").find("more than") != std::string::npos);
  CHECK(errorOf("a[0-9999]b[0-9999]").find("more than") != std::string::npos);
}

TEST_CASE("malformed host lists are refused with the reason", "[unit][scheduler]") {
  CHECK(errorOf("") == "an empty host list");
  CHECK(errorOf("  ") == "an empty host list");
  CHECK(errorOf("node[1-2").find("never closed") != std::string::npos);
  CHECK(errorOf("node1-2]").find("without its '['") != std::string::npos);
  CHECK(errorOf("node[1-[2]]").find("inside brackets") != std::string::npos);
  CHECK(errorOf("node[]").find("empty brackets") != std::string::npos);
  CHECK(errorOf("node[3-1]").find("runs backwards") != std::string::npos);
  CHECK(errorOf("node[a-b]").find("neither a number nor a range") != std::string::npos);
  CHECK(errorOf("node[1-]").find("neither a number nor a range") != std::string::npos);
  CHECK(errorOf("node[1,,2]").find("neither a number nor a range") != std::string::npos);
  CHECK(errorOf("node[1-2-3]").find("neither a number nor a range") != std::string::npos);
  CHECK(errorOf("a,,b").find("empty entry") != std::string::npos);
  CHECK(errorOf("a,b,").find("empty entry") != std::string::npos);
  CHECK(errorOf(",a").find("empty entry") != std::string::npos);
  CHECK(errorOf("a b").find("blank") != std::string::npos);
  CHECK(errorOf("n[1-99999999999999999999]").find("neither a number") != std::string::npos);
}

TEST_CASE("run-length counts expand N(xM) entries", "[unit][scheduler]") {
  using Counts = std::vector<int>;
  const auto counts = [](const std::string& text) {
    auto c = expandCounts(text);
    INFO(text << ": " << c.status().message());
    REQUIRE(c.isOk());
    return c.value();
  };
  CHECK(counts("1") == Counts{1});
  CHECK(counts("1(x4)") == Counts{1, 1, 1, 1});
  CHECK(counts("2(x3),1") == Counts{2, 2, 2, 1});
  CHECK(counts("4,2(x2),8") == Counts{4, 2, 2, 8});
  for (const char* bad : {"", "x", "2(x", "2(3)", "2(x0)", "(x2)", "2(x2", "1,,2", "-1", "2(xa)",
                          "1(x99999999999)"}) {
    INFO(bad);
    CHECK_FALSE(expandCounts(bad).isOk());
  }
}
