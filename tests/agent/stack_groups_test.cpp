// The grouping of `dtrun stacks`: ranks whose stacks differ only in what differs between identical
// processes (addresses, thread ids, which thread took the signal) fall into one group; groups come
// largest first with compact rank lists; a node's answer survives its trip through JSON.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "live/live.h"

namespace {

using dtrun::agent::detail::groupStacks;
using dtrun::agent::detail::mainThreadOf;
using dtrun::agent::detail::NodeStacks;
using dtrun::agent::detail::nodeStacksFromJson;
using dtrun::agent::detail::normalisedNative;
using dtrun::agent::detail::normalisedPython;
using dtrun::agent::detail::rankList;
using dtrun::agent::detail::RankStacks;

// eu-stack's text of a process with two threads; `base` shifts every address (ASLR).
std::string euStack(int pid, const std::string& base, const std::string& innermost) {
  return "PID " + std::to_string(pid) + " - process\nTID " + std::to_string(pid) + ":\n#0  0x" +
         base + "1d36 " + innermost + "\n#1  0x" + base +
         "2b88 _PyEval_EvalFrameDefault - 1\n#2  0x" + base + "3000 main - 1\nTID " +
         std::to_string(pid + 7) + ":\n#0  0x" + base + "9999 epoll_wait\n";
}

// faulthandler's text: the main thread (the one that took the signal) in `function`.
std::string faulthandler(const std::string& threadId, const std::string& function, int line) {
  return "Thread 0x00007f" + threadId +
         "00 (most recent call first):\n  File \"/usr/lib/python3.11/threading.py\", line 324 "
         "in wait\n\nCurrent thread 0x00007f" +
         threadId +
         "40 (most recent call first):\n  File \"/usr/share/dtrun/python/dtrun_torch_hook.py\", "
         "line 109 in wait\n  File \"/w/train.py\", line " +
         std::to_string(line) + " in " + function +
         "\n  File \"/w/train.py\", line 30 in <module>\n";
}

RankStacks rank(int r, int node, const std::string& function, int line) {
  const std::string id = std::to_string(1000 + r);
  return RankStacks{
      r,
      node,
      "h" + std::to_string(node),
      100 + r,
      faulthandler(id, function, line),
      mainThreadOf(euStack(100 + r, "7f" + id, "__futex_abstimed_wait_common"), 100 + r)};
}

}  // namespace

TEST_CASE("a native stack keeps its main thread's functions, without addresses", "[unit]") {
  const std::string text = euStack(42, "7f00aa", "__poll");
  const std::string main = mainThreadOf(text, 42);
  CHECK(main.find("epoll_wait") == std::string::npos);  // thread 49's
  CHECK(normalisedNative(main) == "__poll\n_PyEval_EvalFrameDefault\nmain\n");
  // gdb marks threads by LWP; its frames carry "in" and arguments.
  const std::string gdb =
      "Thread 2 (Thread 0x7f1 (LWP 50) \"python3\"):\n#0  0x00007f in epoll_wait () from "
      "/lib/libc.so.6\nThread 1 (Thread 0x7f2 (LWP 42) \"python3\"):\n#0  0x00007f00 in "
      "__poll (fds=0x55, n=1) at poll.c:29\n#1  0x00005 in ?? ()\n#2  main (argc=1) at m.c:3\n";
  CHECK(normalisedNative(mainThreadOf(gdb, 42)) == "__poll\n??\nmain\n");
  // Without any frame, the tool's words say why.
  CHECK(normalisedNative("(no stack: neither eu-stack (elfutils) nor gdb is installed)\n") ==
        "(no stack: neither eu-stack (elfutils) nor gdb is installed)\n");
}

TEST_CASE("Python stacks lose their thread ids and which thread took the signal", "[unit]") {
  CHECK(normalisedPython(faulthandler("aaaa", "step", 12)) ==
        normalisedPython(faulthandler("bbbb", "step", 12)));
  CHECK(normalisedPython(faulthandler("aaaa", "step", 12)) !=
        normalisedPython(faulthandler("aaaa", "step", 13)));
}

TEST_CASE("rank lists are compact ranges", "[unit]") {
  CHECK(rankList({7}) == "rank 7");
  CHECK(rankList({0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15}) == "ranks 0-6, 8-15");
  CHECK(rankList({3, 1, 5}) == "ranks 1, 3, 5");
}

TEST_CASE("ranks with identical stacks are one group, the largest first", "[unit]") {
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 16; ++r) {
    ranks.push_back(r == 7 ? rank(r, r / 8, "load_batch", 9) : rank(r, r / 8, "all_reduce", 20));
  }
  const std::string text = groupStacks("dtrun stacks #1 of run j", ranks, {"node 2: no answer"});
  INFO(text);
  const auto big =
      text.find("\nranks 0-6, 8-15: all_reduce (train.py:20)  [15 ranks on nodes 0-1]");
  const auto small = text.find("\nrank 7: load_batch (train.py:9)  [1 rank on node 0]");
  REQUIRE(big != std::string::npos);
  REQUIRE(small != std::string::npos);
  CHECK(big < small);
  CHECK(text.starts_with("dtrun stacks #1 of run j\n"));
  CHECK(text.find("__futex_abstimed_wait_common") != std::string::npos);
  CHECK(text.find("0x7f") == std::string::npos);  // no address, no thread id
  CHECK(text.ends_with("\nnode 2: no answer\n"));
}

TEST_CASE("a node's stacks come back from their JSON form", "[unit]") {
  NodeStacks node{3, "h3", {rank(24, 3, "all_reduce", 20), rank(25, 3, "load_batch", 9)}};
  const auto back = nodeStacksFromJson(toJson(node));
  REQUIRE(back);
  REQUIRE(back->ranks.size() == 2);
  CHECK(back->node == 3);
  CHECK(back->ranks[1].rank == 25);
  CHECK(back->ranks[1].node == 3);
  CHECK(back->ranks[1].host == "h3");
  CHECK(back->ranks[1].python == node.ranks[1].python);
  CHECK(back->ranks[1].native == node.ranks[1].native);
  CHECK_FALSE(nodeStacksFromJson(nlohmann::json::parse(R"({"node":"x","ranks":[]})")));
  CHECK_FALSE(nodeStacksFromJson(nlohmann::json::array()));
}
