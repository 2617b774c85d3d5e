// What `dtrun bundle RUN_DIR` packs: a run directory (<log_dir>/<run_id>) read into the files of
// one archive for a person or a bug report. The run's record (run.json: command line, versions,
// host, placement), its report (report.json, and the same as an HTML page), the event log when
// --event_log wrote one; per attempt the hang diagnosis; per rank the environment dtrun gave it,
// its logs' tails, its error file, stacks and progress. Every text passes text::redactSecrets,
// so no store token or etcd password leaves the machine. A MANIFEST.txt says what is in it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"

#include "report/tar_archive.h"

namespace dtrun::launcher {

// The most of a log's end that a bundle keeps, per file.
inline constexpr std::size_t kBundleLogTailBytes = std::size_t{256} * 1024;

// The archive's files, all under "dtrun-bundle-<run dir's name>/"; kInvalidArgument with one line
// when `runDir` is no run directory (no run.json and no attempt_N/).
Result<std::vector<ArchiveFile>> collectRunBundle(const std::filesystem::path& runDir,
                                                  std::string_view packedBy);

}  // namespace dtrun::launcher
