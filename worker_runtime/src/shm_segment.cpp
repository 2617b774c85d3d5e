#include "shm_segment.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun/common.h"
#include "dtrun/runtime.h"

namespace dtrun::runtime::detail::shm {
namespace {

constexpr std::size_t kMinBytes = std::size_t{64} << 10U;
constexpr std::size_t kMaxBytes = std::size_t{1} << 30U;

std::string errnoText(int err) { return std::system_category().message(err); }

}  // namespace

std::unique_ptr<Segment> Segment::create(const std::string& path, std::size_t bytes,
                                         std::string& error) {
  const UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    error = "cannot create " + path + ": " + errnoText(errno);
    return nullptr;
  }
  // posix_fallocate returns the error (it does not set errno).
  if (const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    error = "cannot allocate " + std::to_string(bytes >> 10U) + " KiB in " + path + ": " +
            errnoText(err);
    ::unlink(path.c_str());
    return nullptr;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    error = "cannot map " + path + ": " + errnoText(errno);
    ::unlink(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<Segment>(new Segment(static_cast<std::byte*>(base), bytes));
}

std::unique_ptr<Segment> Segment::open(const std::string& path, std::size_t bytes,
                                       std::string& error, std::size_t minBytes) {
  const UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    error = "cannot open " + path + ": " + errnoText(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    error = "cannot stat " + path + ": " + errnoText(errno);
    return nullptr;
  }
  const auto size = static_cast<std::size_t>(std::max<off_t>(st.st_size, 0));
  if (bytes == 0 && size < minBytes) {
    error = path + " is not a segment (size " + std::to_string(size) + ")";
    return nullptr;
  }
  if (bytes != 0 && size != bytes) {
    // Another size: the ranks disagree on DTRUN_SHM_SLOT_BYTES.
    error = path + " holds " + std::to_string(size) + " bytes, not " + std::to_string(bytes) +
            " (is DTRUN_SHM_SLOT_BYTES the same on every rank?)";
    return nullptr;
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    error = "cannot map " + path + ": " + errnoText(errno);
    return nullptr;
  }
  return std::unique_ptr<Segment>(new Segment(static_cast<std::byte*>(base), size));
}

Segment::~Segment() { ::munmap(base_, bytes_); }

std::size_t bytesFromEnv(const char* name, std::size_t fallback) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == nullptr || *end != '\0' || v < kMinBytes || v > kMaxBytes || !std::has_single_bit(v)) {
    throw ConfigError(std::string(name) + "='" + text +
                      "': expected a power of two from 65536 to 1073741824");
  }
  return static_cast<std::size_t>(v);
}

}  // namespace dtrun::runtime::detail::shm
