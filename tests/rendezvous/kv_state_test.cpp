#include "kv_state.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace dtrun::rdzv::detail;

namespace {

struct RecordingListener final : KvListener {
  std::vector<ClientId> released;
  std::vector<std::pair<ClientId, std::string>> events;
  void onWaitReleased(ClientId client) override { released.push_back(client); }
  void onWatchEvent(ClientId client, std::string_view event) override {
    events.emplace_back(client, std::string(event));
  }
};

}  // namespace

TEST_CASE("a wait completes only when every key it names is present", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  kv.set("a", "1");
  CHECK(kv.wait(1, {"a"}));
  CHECK_FALSE(kv.wait(1, {"a", "b", "c"}));
  kv.set("b", "2");
  CHECK(listener.released.empty());
  kv.set("b", "again");  // the same key twice does not count twice
  CHECK(listener.released.empty());
  kv.set("c", "3");
  CHECK(listener.released == std::vector<ClientId>{1});
  CHECK(kv.pendingWaits() == 0);
}

TEST_CASE("add keeps a decimal ASCII counter and refuses other values", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK(kv.add("n", 5).value() == 5);
  CHECK(kv.add("n", -7).value() == -2);
  CHECK(*kv.get("n") == "-2");
  kv.set("text", "abc");
  CHECK_FALSE(kv.add("text", 1).isOk());
  CHECK_FALSE(kv.wait(4, {"m"}));
  CHECK(kv.add("m", 1).value() == 1);
  CHECK(listener.released == std::vector<ClientId>{4});
}

TEST_CASE("compare_set follows upstream's semantics, including its quirk", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK(kv.compareSet("cas", "", "v1") == "v1");
  CHECK(kv.compareSet("cas", "wrong", "v2") == "v1");
  CHECK(kv.compareSet("cas", "v1", "v2") == "v2");
  CHECK(kv.compareSet("nokey", "x", "y") == "x");  // "lying": nothing is stored
  CHECK(kv.get("nokey") == nullptr);
  CHECK_FALSE(kv.wait(2, {"later"}));
  CHECK(kv.compareSet("later", "", "now") == "now");  // unlike torch 1.13, waiters wake
  CHECK(listener.released == std::vector<ClientId>{2});
}

TEST_CASE("cancelled and disconnected waits are forgotten", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK_FALSE(kv.wait(1, {"k"}));
  CHECK_FALSE(kv.wait(2, {"k", "j"}));
  CHECK_FALSE(kv.wait(3, {"k"}));
  CHECK(kv.cancelWaits(1) == 1);
  kv.dropClient(2);
  CHECK(kv.pendingWaits() == 1);
  kv.set("k", "v");
  CHECK(listener.released == std::vector<ClientId>{3});
  CHECK(kv.pendingWaits() == 0);
}

TEST_CASE("a barrier releases everyone when the last arrives, and later arrivals at once",
          "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK_FALSE(kv.barrier(1, "bar", 3).value());
  CHECK_FALSE(kv.barrier(2, "bar", 3).value());
  CHECK(listener.released.empty());
  CHECK(kv.barrier(3, "bar", 3).value());
  CHECK(listener.released == std::vector<ClientId>{1, 2});
  CHECK(kv.barrier(4, "bar", 3).value());
  CHECK(*kv.get("bar") == "4");
}

TEST_CASE("a pushed item wakes one blocked consumer, queues count as present", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK_FALSE(kv.wait(1, {"q"}));
  CHECK_FALSE(kv.wait(2, {"q"}));
  kv.queuePush("q", "first");
  CHECK(listener.released == std::vector<ClientId>{1});
  CHECK(kv.check({"q"}));
  CHECK(kv.queueLen("q") == 1);
  CHECK(kv.numKeys() == 0);  // queues are not keys
  std::string value;
  CHECK(kv.queuePop("q", value) == 1);
  CHECK(value == "first");
  CHECK(kv.queuePop("q", value) == 0);
  CHECK_FALSE(kv.check({"q"}));
  kv.queuePush("q", "second");
  CHECK(listener.released == std::vector<ClientId>{1, 2});
}

TEST_CASE("watchers see creations, updates and deletions with old and new values", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  kv.watch(7, "/a");
  kv.set("/a", "1");
  kv.set("/a", "2");
  kv.set("/other", "x");
  CHECK(kv.deleteKey("/a"));
  CHECK_FALSE(kv.deleteKey("/a"));
  REQUIRE(listener.events.size() == 3);
  const auto event = [](WatchEvent type, std::string_view oldValue, std::string_view newValue) {
    std::string out(1, static_cast<char>(type));
    appendBytes(out, "/a");
    appendBytes(out, oldValue);
    appendBytes(out, newValue);
    return out;
  };
  CHECK(listener.events[0].second == event(WatchEvent::kCreated, "", "1"));
  CHECK(listener.events[1].second == event(WatchEvent::kUpdated, "1", "2"));
  CHECK(listener.events[2].second == event(WatchEvent::kDeleted, "2", ""));
  kv.dropClient(7);
  kv.set("/a", "3");
  CHECK(listener.events.size() == 3);
}

TEST_CASE("append creates or extends a value and wakes its waiters", "[unit][rdzv]") {
  RecordingListener listener;
  KvState kv(listener);
  CHECK_FALSE(kv.wait(9, {"log"}));
  kv.append("log", "a");
  kv.append("log", "b");
  CHECK(*kv.get("log") == "ab");
  CHECK(listener.released == std::vector<ClientId>{9});
}
