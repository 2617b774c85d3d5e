// The progress file between a writer and a reader that map it separately, as a worker and its
// agent do; a node's ranks in their slots of one file; and a Python-written file
// (python/dtrun_progress.py) read by the C++ reader.
#include "progress_file.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/scoped.h"

using dtrun::progress::ProgressReader;
using dtrun::progress::ProgressWriter;

namespace {

// A progress file's path in a directory of its own, removed at the end of the test.
struct FreshPath {
  dtrun::testing::TempDir dir;
  const std::string path = dir.path() / "progress";
};

// A fresh progress file mapped by a writer and a reader, as a worker and its agent map it.
struct MappedFile {
  const FreshPath fresh{};
  const bool created = dtrun::progress::createProgressFile(fresh.path, 1);
  std::optional<ProgressWriter> writer = ProgressWriter::open(fresh.path, 0);
  std::optional<ProgressReader> reader = ProgressReader::open(fresh.path, 0);
};

// The slot's seqlock, mapped apart from the writer and the reader, to hold it odd as a writer
// stopped in the middle of an update does.
class SeqLock {
 public:
  explicit SeqLock(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    base_ = ::mmap(nullptr, dtrun::progress::kProgressFileSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    ::close(fd);
    REQUIRE(base_ != MAP_FAILED);
  }
  SeqLock(const SeqLock&) = delete;
  SeqLock& operator=(const SeqLock&) = delete;
  SeqLock(SeqLock&&) = delete;
  SeqLock& operator=(SeqLock&&) = delete;
  ~SeqLock() { ::munmap(base_, dtrun::progress::kProgressFileSize); }
  void bump() { seq().fetch_add(1); }

 private:
  std::atomic<std::uint64_t>& seq() {
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(static_cast<char*>(base_) + 8);  // NOLINT
  }
  void* base_ = nullptr;
};

}  // namespace

TEST_CASE("a progress file carries operations from writer to reader", "[unit][progress]") {
  MappedFile mapped;
  REQUIRE(mapped.created);
  auto& writer = mapped.writer;
  auto& reader = mapped.reader;
  REQUIRE(writer);
  REQUIRE(reader);

  auto empty = reader->read();
  REQUIRE(empty);
  CHECK(empty->ops == 0);
  CHECK(empty->opStartNs == 0);
  CHECK(empty->pid == ::getpid());

  const std::string longGroup = "dtrt/tcp/a-group-name-longer-than-forty-seven-characters";
  writer->begin("all_reduce", longGroup, 4096);
  auto inside = reader->read();
  REQUIRE(inside);
  CHECK(inside->ops == 1);
  CHECK(inside->op == "all_reduce");
  CHECK(inside->group == longGroup.substr(0, 47));  // 47 characters and a NUL
  CHECK(inside->bytes == 4096);
  CHECK(inside->opStartNs > 0);
  CHECK(inside->changedNs == inside->opStartNs);

  writer->end();
  writer->markStoreConnected();
  writer->markCommunicatorReady();
  auto after = reader->read();
  REQUIRE(after);
  CHECK(after->ops == 1);
  CHECK(after->opStartNs == 0);
  CHECK(after->changedNs >= inside->changedNs);
  CHECK(after->storeConnectedNs > 0);
  CHECK(after->commReadyNs > 0);
  const auto firstReady = after->commReadyNs;
  writer->markCommunicatorReady();  // only the first one counts
  CHECK(reader->read()->commReadyNs == firstReady);
}

TEST_CASE("a reader never sees a torn snapshot while a writer runs", "[unit][progress]") {
  MappedFile mapped;
  REQUIRE(mapped.created);
  auto& writer = mapped.writer;
  auto& reader = mapped.reader;
  REQUIRE(writer);
  REQUIRE(reader);
  constexpr int kOps = 20000;
  std::atomic<bool> reading{false};
  std::atomic<bool> written{false};
  std::thread writing([&] {
    while (!reading.load()) {  // overlap with the reader, however the threads are scheduled
      std::this_thread::yield();
    }
    for (int i = 1; i <= kOps; ++i) {
      // Name and byte count agree in every consistent state: "op<i % 7>" with i % 7 bytes.
      writer->begin(("op" + std::to_string(i % 7)).c_str(), "g", static_cast<std::uint64_t>(i % 7));
      writer->end();
    }
    written = true;
  });
  int consistent = 0;
  reading = true;
  for (bool last = false; !last;) {
    last = written.load();  // one more read after the writer finished: it must see every op
    if (auto s = reader->read(); s && s->ops > 0) {
      REQUIRE(s->op == "op" + std::to_string(s->ops % 7));
      REQUIRE(s->bytes == s->ops % 7);
      ++consistent;
    }
  }
  writing.join();
  CHECK(reader->read()->ops == kOps);
  CHECK(consistent > 0);
}

TEST_CASE("a file that is not a progress file is refused", "[unit][progress]") {
  const FreshPath fresh{};
  const std::string& path = fresh.path;
  std::FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  std::fputs(std::string(300, 'x').c_str(), file);
  std::fclose(file);
  CHECK_FALSE(ProgressReader::open(path, 0));
  CHECK_FALSE(ProgressWriter::open(path, 0));
  CHECK_FALSE(ProgressReader::open(path + ".missing", 0));
}

TEST_CASE("a node's ranks write their own slots of one file", "[unit][progress]") {
  // 10 slots: two pages, so slot 9 is mapped at an offset within the second one.
  const FreshPath fresh{};
  constexpr std::size_t kSlots = 10;
  REQUIRE(dtrun::progress::createProgressFile(fresh.path, kSlots));
  std::vector<ProgressWriter> writers;
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    auto writer = ProgressWriter::open(fresh.path, slot);
    REQUIRE(writer);
    writers.push_back(std::move(*writer));
  }
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    for (std::size_t op = 0; op <= slot; ++op) {
      writers[slot].begin("all_reduce", "rank" + std::to_string(slot), slot);
    }
  }
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    const auto reader = ProgressReader::open(fresh.path, slot);
    REQUIRE(reader);
    const auto s = reader->read();
    REQUIRE(s);
    CHECK(s->ops == slot + 1);
    CHECK(s->group == "rank" + std::to_string(slot));
    CHECK(s->bytes == slot);
  }
  // A slot past the file's end would be SIGBUS to touch: refused.
  CHECK_FALSE(ProgressReader::open(fresh.path, kSlots));
  CHECK_FALSE(ProgressWriter::open(fresh.path, kSlots + 100));
  // One whose offset wraps around to slot 0's (a DTRUN_PROGRESS_SLOT of garbage) too.
  CHECK_FALSE(ProgressWriter::open(
      fresh.path,
      std::numeric_limits<std::size_t>::max() / dtrun::progress::kProgressFileSize + 1));
}

TEST_CASE("python/dtrun_progress.py writes the same layout", "[unit][progress]") {
  const FreshPath fresh{};
  const std::string& path = fresh.path;
  REQUIRE(dtrun::progress::createProgressFile(path, 10));
  const std::string command = "DTRUN_PROGRESS_FILE=" + path +
                              " DTRUN_PROGRESS_SLOT=9 PYTHONPATH=" DTRUN_SOURCE_DIR
                              "/python DTRUN_LOG_DIR= "
                              "/usr/bin/python3 -c 'import dtrun_progress as p; "
                              "p.mark_store_connected(); p.begin(\"load_batch\", \"world\", 12)'";
  REQUIRE(std::system(command.c_str()) == 0);              // NOLINT(concurrency-mt-unsafe)
  CHECK(ProgressReader::open(path, 0)->read()->ops == 0);  // slot 9's, not the file's first
  auto reader = ProgressReader::open(path, 9);
  REQUIRE(reader);
  auto s = reader->read();
  REQUIRE(s);
  CHECK(s->ops == 1);
  CHECK(s->op == "load_batch");
  CHECK(s->group == "world");
  CHECK(s->bytes == 12);
  CHECK(s->opStartNs > 0);
  CHECK(s->storeConnectedNs > 0);
  CHECK(s->stackSignal == 0);  // no DTRUN_LOG_DIR: no faulthandler file, no signal offered
}

TEST_CASE("with entry times on, the last 32 operations' entries come back in order",
          "[unit][progress]") {
  const FreshPath fresh{};
  REQUIRE(dtrun::progress::createProgressFile(fresh.path, 1, /*entryTimes=*/true));
  auto writer = ProgressWriter::open(fresh.path, 0);
  auto reader = ProgressReader::open(fresh.path, 0);
  REQUIRE(writer);
  REQUIRE(reader);
  const std::int64_t before = dtrun::progress::realtimeNs();
  for (int i = 0; i < 40; ++i) {
    writer->begin("all_reduce", "world", 4);
    writer->end();
  }
  const auto s = reader->read();
  REQUIRE(s);
  REQUIRE(s->entries.size() == dtrun::progress::kEntryRingSize);
  CHECK(s->entries.front().first == 9);
  CHECK(s->entries.back().first == 40);
  for (std::size_t i = 1; i < s->entries.size(); ++i) {
    CHECK(s->entries[i].first == s->entries[i - 1].first + 1);
    CHECK(s->entries[i].second >= s->entries[i - 1].second);
  }
  CHECK(s->entries.front().second >= before);
  CHECK(s->entries.back().second <= dtrun::progress::realtimeNs());
}

TEST_CASE("with entry times off, writers record none", "[unit][progress]") {
  MappedFile mapped;
  REQUIRE(mapped.writer);
  mapped.writer->begin("all_reduce", "world", 4);
  const auto s = mapped.reader->read();
  REQUIRE(s);
  CHECK(s->ops == 1);
  CHECK(s->entries.empty());
}

TEST_CASE("python/dtrun_progress.py records entry times when the agent asks", "[unit][progress]") {
  const FreshPath fresh{};
  const std::string& path = fresh.path;
  REQUIRE(dtrun::progress::createProgressFile(path, 1, /*entryTimes=*/true));
  const std::int64_t before = dtrun::progress::realtimeNs();
  const std::string command = "DTRUN_PROGRESS_FILE=" + path +
                              " PYTHONPATH=" DTRUN_SOURCE_DIR
                              "/python DTRUN_LOG_DIR= "
                              "/usr/bin/python3 -c 'import dtrun_progress as p; "
                              "[(p.begin(\"all_reduce\"), p.end()) for _ in range(3)]'";
  REQUIRE(std::system(command.c_str()) == 0);  // NOLINT(concurrency-mt-unsafe)
  auto reader = ProgressReader::open(path, 0);
  REQUIRE(reader);
  const auto s = reader->read();
  REQUIRE(s);
  CHECK(s->ops == 3);
  REQUIRE(s->entries.size() == 3);
  CHECK(s->entries[0].first == 1);
  CHECK(s->entries[2].first == 3);
  CHECK(s->entries[0].second >= before);
  CHECK(s->entries[2].second >= s->entries[0].second);
}

// A Python worker preempted in the middle of its update on a loaded machine holds the seqlock odd
// past the reader's tries (the flake table's live_status_test saw a rank's operation counter read
// 0 for one scrape).
TEST_CASE("a torn progress read shows the last consistent one", "[unit][progress]") {
  MappedFile mapped;
  REQUIRE(mapped.created);
  auto& writer = mapped.writer;
  auto& reader = mapped.reader;
  REQUIRE(writer);
  REQUIRE(reader);
  SeqLock lock(mapped.fresh.path);

  SECTION("nothing read before: nothing to show") {
    lock.bump();
    CHECK_FALSE(reader->read());
    lock.bump();
  }

  writer->begin("all_reduce", "world", 4);
  auto first = reader->read();
  REQUIRE(first);
  CHECK(first->ops == 1);

  lock.bump();  // the writer is in the middle of an update, and stays there
  auto torn = reader->read();
  REQUIRE(torn);
  CHECK(torn->ops == 1);
  CHECK(torn->op == "all_reduce");

  lock.bump();  // the update is done
  writer->begin("barrier", "world", 0);
  auto next = reader->read();
  REQUIRE(next);
  CHECK(next->ops == 2);
  CHECK(next->op == "barrier");
}
