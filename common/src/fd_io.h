// Whole-buffer reads and writes on blocking descriptors (internal to dtrun). Both retry on EINTR,
// allocate nothing and are async-signal-safe, so fatal-signal handlers and the code between fork
// and exec may use them.
#pragma once

#include <cstddef>
#include <string_view>

namespace dtrun::io {

// Writes all `size` bytes. False on the first error or zero-length write (errno says why); the
// caller decides whether that matters (a closed console must not stop the agent).
bool writeAll(int fd, const void* data, std::size_t size) noexcept;
inline bool writeAll(int fd, std::string_view text) noexcept {
  return writeAll(fd, text.data(), text.size());
}

// Reads until `size` bytes arrived or end of file. The byte count read (less than `size` at end
// of file), or -1 on an error (errno says which).
long readFull(int fd, void* data, std::size_t size) noexcept;

}  // namespace dtrun::io
