#include "progress_file.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun/common.h"

#include "fd_io.h"

namespace dtrun::progress {
namespace {

constexpr std::size_t kSeq = 8;
constexpr std::size_t kOps = 16;
constexpr std::size_t kOpStart = 24;
constexpr std::size_t kChanged = 32;
constexpr std::size_t kBytes = 40;
constexpr std::size_t kStoreConnected = 48;
constexpr std::size_t kCommReady = 56;
constexpr std::size_t kStackSignal = 64;
constexpr std::size_t kPid = 68;
constexpr std::size_t kOp = 72;
constexpr std::size_t kGroup = 112;
constexpr std::size_t kEntryTimes = 160;
constexpr std::size_t kEntryRing = 256;
constexpr int kReadTries = 64;

// Every field is accessed atomically (relaxed) so that the two processes never race in the
// C++ sense; the seqlock's release/acquire pairs make a snapshot consistent.
template <typename T>
std::atomic_ref<T> field(unsigned char* base, std::size_t offset) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(base + offset));  // NOLINT: aligned by layout
}
template <typename T>
T load(const unsigned char* base, std::size_t offset) {
  // atomic_ref needs a mutable reference; the load does not write.
  return field<T>(const_cast<unsigned char*>(base), offset)  // NOLINT
      .load(std::memory_order_relaxed);
}

// Text fields go through 8-byte atomic words, so a reader never sees a torn word.
void storeText(unsigned char* base, std::size_t offset, std::size_t size, std::string_view text) {
  std::array<unsigned char, kGroupNameSize> buffer{};
  std::memcpy(buffer.data(), text.data(), std::min(text.size(), size - 1));
  for (std::size_t i = 0; i < size; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, buffer.data() + i, 8);
    field<std::uint64_t>(base, offset + i).store(word, std::memory_order_relaxed);
  }
}
std::string loadText(const unsigned char* base, std::size_t offset, std::size_t size) {
  std::array<char, kGroupNameSize + 1> buffer{};
  for (std::size_t i = 0; i < size; i += 8) {
    const auto word = load<std::uint64_t>(base, offset + i);
    std::memcpy(buffer.data() + i, &word, 8);
  }
  buffer[size - 1] = '\0';
  return buffer.data();
}

std::int64_t clockNs(clockid_t clock) {
  timespec now{};
  ::clock_gettime(clock, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::size_t pageSize() {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// Maps the page that holds slot `slot` of `path`; returns the slot's first byte, or nullptr when
// the file cannot be opened, is too short to hold the slot (touching it would be SIGBUS) or the
// slot is not a progress slot.
unsigned char* mapSlot(const std::string& path, std::size_t slot, bool writable) {
  static_assert(4096 % kProgressFileSize == 0, "a slot must never straddle two pages");
  UniqueFd fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 ||
      static_cast<std::size_t>(st.st_size) / kProgressFileSize <= slot) {
    return nullptr;
  }
  const std::size_t offset = slot * kProgressFileSize;
  const std::size_t within = offset % pageSize();
  void* page =
      ::mmap(nullptr, within + kProgressFileSize, writable ? PROT_READ | PROT_WRITE : PROT_READ,
             MAP_SHARED, fd.get(), static_cast<off_t>(offset - within));
  if (page == MAP_FAILED) {
    return nullptr;
  }
  auto* bytes = static_cast<unsigned char*>(page) + within;
  if (load<std::uint64_t>(bytes, 0) != kProgressMagic) {
    ::munmap(page, within + kProgressFileSize);
    return nullptr;
  }
  return bytes;
}

// The mapping began at the slot's page: its offset in that page tells where.
void unmapSlot(const unsigned char* slot) {
  const std::size_t within = reinterpret_cast<std::uintptr_t>(slot) % pageSize();
  ::munmap(const_cast<unsigned char*>(slot - within), within + kProgressFileSize);  // NOLINT: ours
}

}  // namespace

std::int64_t monotonicNs() { return clockNs(CLOCK_MONOTONIC); }
std::int64_t realtimeNs() { return clockNs(CLOCK_REALTIME); }

bool createProgressFile(const std::string& path, std::size_t slots, bool entryTimes) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return false;
  }
  std::vector<unsigned char> content(slots * kProgressFileSize);
  const std::int32_t on = entryTimes ? 1 : 0;
  for (std::size_t at = 0; at < content.size(); at += kProgressFileSize) {
    std::memcpy(content.data() + at, &kProgressMagic, sizeof kProgressMagic);
    std::memcpy(content.data() + at + kEntryTimes, &on, sizeof on);
  }
  return io::writeAll(fd.get(), content.data(), content.size());
}

std::optional<ProgressWriter> ProgressWriter::open(const std::string& path, std::size_t slot) {
  unsigned char* base = mapSlot(path, slot, true);
  if (base == nullptr) {
    return std::nullopt;
  }
  ProgressWriter writer(base);
  field<std::int32_t>(base, kPid)
      .store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  return writer;
}

ProgressWriter::ProgressWriter(ProgressWriter&& other) noexcept : base_(other.base_) {
  other.base_ = nullptr;
}

ProgressWriter::~ProgressWriter() {
  if (base_ != nullptr) {
    unmapSlot(base_);
  }
}

void ProgressWriter::begin(const char* op, const std::string& group, std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  auto seq = field<std::uint64_t>(base_, kSeq);
  const std::uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const std::int64_t now = monotonicNs();
  const std::uint64_t ops =
      field<std::uint64_t>(base_, kOps).fetch_add(1, std::memory_order_relaxed) + 1;
  if (load<std::int32_t>(base_, kEntryTimes) != 0) {
    field<std::int64_t>(base_, kEntryRing + 8 * (ops % kEntryRingSize))
        .store(realtimeNs(), std::memory_order_relaxed);
  }
  field<std::int64_t>(base_, kOpStart).store(now, std::memory_order_relaxed);
  field<std::int64_t>(base_, kChanged).store(now, std::memory_order_relaxed);
  field<std::uint64_t>(base_, kBytes).store(bytes, std::memory_order_relaxed);
  storeText(base_, kOp, kOpNameSize, op);
  storeText(base_, kGroup, kGroupNameSize, group);
  seq.store(s + 2, std::memory_order_release);
}

void ProgressWriter::end() {
  const std::lock_guard lock(mutex_);
  auto seq = field<std::uint64_t>(base_, kSeq);
  const std::uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  field<std::int64_t>(base_, kOpStart).store(0, std::memory_order_relaxed);
  field<std::int64_t>(base_, kChanged).store(monotonicNs(), std::memory_order_relaxed);
  seq.store(s + 2, std::memory_order_release);
}

void ProgressWriter::markStoreConnected() {
  field<std::int64_t>(base_, kStoreConnected).store(realtimeNs(), std::memory_order_relaxed);
}

void ProgressWriter::markCommunicatorReady() {
  std::int64_t unset = 0;
  field<std::int64_t>(base_, kCommReady)
      .compare_exchange_strong(unset, realtimeNs(), std::memory_order_relaxed);
}

std::optional<ProgressReader> ProgressReader::open(const std::string& path, std::size_t slot) {
  const unsigned char* base = mapSlot(path, slot, false);
  if (base == nullptr) {
    return std::nullopt;
  }
  return ProgressReader(base);
}

ProgressReader::~ProgressReader() {
  if (base_ != nullptr) {
    unmapSlot(base_);
  }
}

std::optional<Snapshot> ProgressReader::read() const {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const auto before = field<std::uint64_t>(const_cast<unsigned char*>(base_), kSeq)  // NOLINT
                            .load(std::memory_order_acquire);
    if (before % 2 != 0) {
      continue;
    }
    Snapshot s;
    s.ops = load<std::uint64_t>(base_, kOps);
    s.opStartNs = load<std::int64_t>(base_, kOpStart);
    s.changedNs = load<std::int64_t>(base_, kChanged);
    s.bytes = load<std::uint64_t>(base_, kBytes);
    s.op = loadText(base_, kOp, kOpNameSize);
    s.group = loadText(base_, kGroup, kGroupNameSize);
    if (load<std::int32_t>(base_, kEntryTimes) != 0) {
      // The oldest first; slots of operations not begun yet (or before the ring filled) hold 0.
      const std::uint64_t first = s.ops >= kEntryRingSize ? s.ops - kEntryRingSize + 1 : 1;
      for (std::uint64_t n = first; n <= s.ops; ++n) {
        const auto at = load<std::int64_t>(base_, kEntryRing + 8 * (n % kEntryRingSize));
        if (at != 0) {
          s.entries.emplace_back(n, at);
        }
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (load<std::uint64_t>(base_, kSeq) != before) {
      continue;
    }
    s.storeConnectedNs = load<std::int64_t>(base_, kStoreConnected);
    s.commReadyNs = load<std::int64_t>(base_, kCommReady);
    s.stackSignal = load<std::int32_t>(base_, kStackSignal);
    s.pid = load<std::int32_t>(base_, kPid);
    last_ = s;
    return s;
  }
  return last_;
}

}  // namespace dtrun::progress
