// The hosts of `dtrun --hostfile` / `--hosts`: DeepSpeed's and OpenMPI's hostfile formats, the
// errors (file:line and the fix), --include / --exclude, and the line cutter of the consoles.
#include "fanout/hostfile.h"

#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fanout/line_cutter.h"

namespace {

namespace launcher = dtrun::launcher;

std::vector<std::string> names(const std::vector<launcher::HostEntry>& hosts) {
  std::vector<std::string> result;
  result.reserve(hosts.size());
  for (const auto& host : hosts) {
    result.push_back(host.name);
  }
  return result;
}

std::string hostfileError(std::string_view text) {
  const auto parsed = launcher::parseHostfile(text, "hf");
  REQUIRE_FALSE(parsed.isOk());
  return parsed.status().message();
}

}  // namespace

TEST_CASE("a DeepSpeed hostfile gives hosts in order with their slots", "[unit]") {
  const auto hosts = launcher::parseHostfile(
      "# the cluster\n"
      "worker-0 slots=4\n"
      "\n"
      "worker-1    slots=2   # half of it\n"
      "\tworker-2\tslots=8\r\n",
      "hostfile");
  REQUIRE(hosts.isOk());
  REQUIRE(names(hosts.value()) == std::vector<std::string>{"worker-0", "worker-1", "worker-2"});
  CHECK(hosts.value()[0].slots == 4);
  CHECK(hosts.value()[1].slots == 2);
  CHECK(hosts.value()[2].slots == 8);
  CHECK(hosts.value()[0].line == 2);
  CHECK(hosts.value()[2].line == 5);
}

TEST_CASE("an OpenMPI hostfile with max_slots, and bare names one per line", "[unit]") {
  const auto hosts = launcher::parseHostfile(
      "node1 slots=2 max_slots=4\nnode2 max-slots=8\nuser@node3\n10.0.0.4\n", "hf");
  REQUIRE(hosts.isOk());
  REQUIRE(hosts.value().size() == 4);
  CHECK(hosts.value()[0].slots == 2);
  CHECK(hosts.value()[0].maxSlots == 4);
  CHECK_FALSE(hosts.value()[1].slots.has_value());
  CHECK(hosts.value()[1].maxSlots == 8);
  CHECK(hosts.value()[2].name == "user@node3");
  CHECK_FALSE(hosts.value()[2].slots.has_value());
  CHECK(launcher::hostAddress(hosts.value()[2].name) == "node3");
  CHECK(launcher::hostAddress("node1") == "node1");
}

TEST_CASE("hostfile errors name file:line and the fix", "[unit]") {
  CHECK(hostfileError("node1 slots=2\nnode2 slots=x\n") ==
        "hf:2: slots expects a whole number from 1 to 1048576, got 'slots=x' (write 'node2 "
        "slots=4')");
  CHECK(hostfileError("node1 slots=0\n").starts_with("hf:1: slots expects a whole number"));
  CHECK(hostfileError("node1 slots=\n").starts_with("hf:1: slots expects a whole number"));
  CHECK(hostfileError("node1 slots=-2\n").starts_with("hf:1: slots expects a whole number"));
  CHECK(hostfileError("node1 gpus=4\n") ==
        "hf:1: unknown setting 'gpus=4' (a line is 'host slots=N', optionally 'max_slots=M')");
  CHECK(hostfileError("node1 slots=1 slots=2\n") == "hf:1: slots is given twice; keep one");
  CHECK(hostfileError("node1 slots=4 max_slots=2\n") ==
        "hf:1: max_slots=2 is below slots=4 (raise max_slots or lower slots)");
  CHECK(hostfileError("a\nb\na slots=2\n") ==
        "hf:3: host a is listed twice (first on line 1); give it once, with slots=N for its "
        "workers");
  CHECK(hostfileError("") == "hf: no host in it (write one host per line: 'node1 slots=4')");
  CHECK(hostfileError("# nothing\n\n  \n") ==
        "hf: no host in it (write one host per line: 'node1 slots=4')");
  CHECK(hostfileError("-oProxyCommand=evil\n") ==
        "hf:1: a host name may not start with '-' (write one host per line: 'node1 slots=4')");
  CHECK(hostfileError("node;rm\n").starts_with("hf:1: the host name 'node;rm' holds ';'"));
  CHECK(hostfileError("a@b@c\n").starts_with("hf:1: 'a@b@c' is not user@host"));
}

TEST_CASE("a host list (--hosts) is comma-separated, host:N giving slots", "[unit]") {
  const auto hosts = launcher::parseHostList("a,b:4, c ,[fe80::1]:2,fe80::2");
  REQUIRE(hosts.isOk());
  REQUIRE(names(hosts.value()) == std::vector<std::string>{"a", "b", "c", "[fe80::1]", "fe80::2"});
  CHECK_FALSE(hosts.value()[0].slots.has_value());
  CHECK(hosts.value()[1].slots == 4);
  CHECK(hosts.value()[3].slots == 2);
  CHECK_FALSE(hosts.value()[4].slots.has_value());

  CHECK(launcher::parseHostList("a,,b").status().message() ==
        "--hosts: an empty host name (write --hosts=node1,node2,node3)");
  CHECK(launcher::parseHostList("a:x").status().message().starts_with(
      "--hosts: 'a:x' has no valid slot count after ':'"));
  CHECK(launcher::parseHostList("a,a").status().message().starts_with(
      "--hosts: host a is listed twice;"));
}

TEST_CASE("host selection (--include, --exclude) keeps the hostfile's order", "[unit]") {
  const auto all = launcher::parseHostList("n1,n2,n3,n4").value();
  const auto pick = [&all](const std::optional<std::string>& include,
                           const std::optional<std::string>& exclude) {
    return launcher::selectHosts(all, include, exclude);
  };
  CHECK(names(pick("n3,n1", std::nullopt).value()) == std::vector<std::string>{"n1", "n3"});
  CHECK(names(pick("n4@n2", std::nullopt).value()) == std::vector<std::string>{"n2", "n4"});
  CHECK(names(pick(std::nullopt, "n2").value()) == std::vector<std::string>{"n1", "n3", "n4"});
  CHECK(names(pick(std::nullopt, std::nullopt).value()).size() == 4);

  CHECK(pick("n1", "n2")
            .status()
            .message()
            .starts_with("--include and --exclude cannot be used together"));
  CHECK(pick("n1:0,1@n2", std::nullopt).status().message() ==
        "--include: GPU indices per host ('n1:0,1') are not supported yet; name whole hosts "
        "(--include=node1,node2)");
  CHECK(pick(std::nullopt, "n9").status().message() ==
        "--exclude: host n9 is not in the host list (n1, n2, n3, n4)");
  CHECK(pick(std::nullopt, "n1,n2,n3,n4").status().message() ==
        "--exclude=n1,n2,n3,n4 leaves no host to run on");
  CHECK(pick("n1,", std::nullopt).status().message().starts_with("--include: an empty host name"));
}

TEST_CASE("the console line cutter gives whole lines and holds the rest", "[unit]") {
  launcher::LineCutter cutter;
  CHECK(cutter.feed("one\ntw").size() == 1);
  CHECK(cutter.holding());
  CHECK(cutter.feed("o\nthree") == std::vector<std::string>{"two\n"});
  CHECK(cutter.flush() == std::vector<std::string>{"three\n"});
  CHECK_FALSE(cutter.holding());
  CHECK(cutter.flush().empty());

  SECTION("\\r\\n across two reads is one end; a lone \\r is a redraw") {
    CHECK(cutter.feed("a\r").empty());
    CHECK(cutter.feed("\nb\rc\n") == std::vector<std::string>{"a\n", "b\r", "c\n"});
  }
  SECTION("a line over the bound is cut, never dropped") {
    const std::string big(launcher::LineCutter::kMaxLine + 10, 'x');
    const auto lines = cutter.feed(big + "\n");
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].size() == launcher::LineCutter::kMaxLine + 1);
    CHECK(lines[1] == std::string(10, 'x') + "\n");
  }
}
