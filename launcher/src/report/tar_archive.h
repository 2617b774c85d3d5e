// A POSIX ustar archive (what `tar -xf` and Python's tarfile read) built in memory from whole
// files: `dtrun bundle` packs a few hundred KiB, so nothing here streams.
#pragma once

#include <ctime>
#include <string>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::launcher {

struct ArchiveFile {
  std::string name;  // a relative path, '/' between folders
  std::string content;
};

// The archive: one regular file (mode 0644, owner 0) per entry with `mtime`, then the two zero
// blocks that end it. Fails, naming the file, when a name cannot be stored (over 255 bytes, or
// with no '/' where ustar can split it) or is not relative.
Result<std::string> tarArchive(const std::vector<ArchiveFile>& files, std::time_t mtime);

}  // namespace dtrun::launcher
