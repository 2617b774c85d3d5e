// The live view's progress reads when a writer holds its seqlock odd: a Python worker preempted
// in the middle of its update on a loaded machine (the flake table's live_status_test saw a
// rank's operation counter read 0 for one scrape).
#include "live/last_progress.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "progress_file.h"
#include "support/scoped.h"

using dtrun::agent::detail::LastProgress;
using dtrun::progress::ProgressReader;
using dtrun::progress::ProgressWriter;

namespace {

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

TEST_CASE("a torn progress read shows the rank's last consistent one", "[unit][agent][live]") {
  const dtrun::testing::TempDir dir;
  const std::string path = dir.path() / "progress";
  REQUIRE(dtrun::progress::createProgressFile(path, 1));
  auto writer = ProgressWriter::open(path, 0);
  auto reader = ProgressReader::open(path, 0);
  REQUIRE(writer);
  REQUIRE(reader);
  SeqLock lock(path);
  LastProgress last;
  constexpr pid_t kPid = 4242;

  writer->begin("all_reduce", "world", 4);
  auto first = last.read(kPid, *reader);
  REQUIRE(first);
  CHECK(first->ops == 1);

  lock.bump();  // the writer is in the middle of an update, and stays there
  CHECK_FALSE(reader->read());
  auto torn = last.read(kPid, *reader);
  REQUIRE(torn);
  CHECK(torn->ops == 1);
  CHECK(torn->op == "all_reduce");

  lock.bump();  // the update is done
  writer->begin("barrier", "world", 0);
  auto next = last.read(kPid, *reader);
  REQUIRE(next);
  CHECK(next->ops == 2);
  CHECK(next->op == "barrier");

  SECTION("another process has no last read to show") {
    lock.bump();
    CHECK_FALSE(last.read(kPid + 1, *reader));
    lock.bump();
  }
  SECTION("a process not read in the last sample is forgotten") {
    last.forgetUnseen();  // read since the last call: kept
    last.forgetUnseen();  // not read since: forgotten
    lock.bump();
    CHECK_FALSE(last.read(kPid, *reader));
    lock.bump();
  }
}
