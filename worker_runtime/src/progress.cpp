#include "progress.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "progress_file.h"

namespace dtrun::runtime::detail {
namespace {

// Set once by openProgress() and never unset: the writer lives until the process exits.
std::atomic<progress::ProgressWriter*> gWriter{nullptr};

}  // namespace

void openProgress() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("DTRUN_PROGRESS_FILE");  // NOLINT(concurrency-mt-unsafe)
    if (path == nullptr || *path == '\0') {
      return;
    }
    // The slot is the rank's in its node's file (DTRUN_PROGRESS_SLOT, its local rank).
    const char* slot = std::getenv("DTRUN_PROGRESS_SLOT");  // NOLINT(concurrency-mt-unsafe)
    static std::optional<progress::ProgressWriter> writer =
        progress::ProgressWriter::open(path, slot == nullptr ? 0 : std::strtoul(slot, nullptr, 10));
    if (writer) {
      writer->markStoreConnected();
      gWriter.store(&*writer, std::memory_order_release);
    }
  });
}

void markCommunicatorReady() {
  if (auto* writer = gWriter.load(std::memory_order_acquire)) {
    writer->markCommunicatorReady();
  }
}

OpProgress::OpProgress(const char* op, const std::string& group, std::uint64_t bytes) {
  if (auto* writer = gWriter.load(std::memory_order_acquire)) {
    writer->begin(op, group, bytes);
  }
}

OpProgress::~OpProgress() {
  if (auto* writer = gWriter.load(std::memory_order_acquire)) {
    writer->end();
  }
}

}  // namespace dtrun::runtime::detail
