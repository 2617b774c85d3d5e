#include "report/run_bundle.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "report/report_html.h"
#include "text.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;

// Whole files larger than this (a runaway stack dump) are left out, and said so.
constexpr std::uintmax_t kWholeFileLimit = std::uintmax_t{16} * 1024 * 1024;
// The event log's end: a long job's log is mostly its early rounds.
constexpr std::size_t kEventLogTailBytes = std::size_t{1024} * 1024;

const std::set<std::string> kLogFiles = {"stdout.log", "stderr.log", "filtered_stdout.log",
                                         "filtered_stderr.log"};
const std::set<std::string> kRankFiles = {"stdout.log", "stderr.log", "error.json", "stack.txt",
                                          "python_stack.txt"};
const std::set<std::string> kAttemptFiles = {
    "hang.txt",    "filtered_stdout.log", "filtered_stderr.log",
    "environment", "worker_pids",         "progress"};
const std::set<std::string> kRunFiles = {"run.json", "report.json"};

std::vector<fs::path> sortedEntries(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    entries.push_back(e.path());
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

class BundleBuilder {
 public:
  BundleBuilder(fs::path runDir, std::string_view packedBy)
      : runDir_(std::move(runDir)),
        top_("dtrun-bundle-" + runDir_.filename().string()),
        packedBy_(packedBy) {}

  // A whole file (or the end of a log, from a line's start), redacted, as `name` in the bundle.
  void addFile(const fs::path& path, const std::string& name, std::size_t tailBytes = 0) {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) {
      note(name + ": not readable (" + ec.message() + ")");
      return;
    }
    if (tailBytes == 0 && size > kWholeFileLimit) {
      note(name + ": left out, " + std::to_string(size) + " bytes");
      return;
    }
    std::ifstream in(path, std::ios::binary);
    std::uintmax_t from = tailBytes > 0 && size > tailBytes ? size - tailBytes : 0;
    in.seekg(static_cast<std::streamoff>(from));
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (from > 0) {  // begin at a line's start
      const std::size_t newline = content.find('\n');
      const std::size_t cut = newline == std::string::npos ? 0 : newline + 1;
      content.erase(0, cut);
      from += cut;
    }
    std::string note = std::to_string(content.size()) + " bytes";
    if (from > 0) {
      note += ", the last of " + std::to_string(size);
    }
    add(name, text::redactSecrets(content), note);
  }

  void add(const std::string& name, std::string content, const std::string& what) {
    note(name + ": " + what);
    files_.push_back({top_ + "/" + name, std::move(content)});
  }

  void note(const std::string& line) { manifest_ += "  " + line + "\n"; }

  // One attempt_N/ directory: its own files and every rank's.
  void addAttempt(const fs::path& dir) {
    for (const fs::path& entry : sortedEntries(dir)) {
      const std::string name = entry.filename().string();
      const std::string path = inBundle(entry);
      std::error_code ec;
      if (fs::is_directory(entry, ec)) {
        addRank(entry);
      } else if (kAttemptFiles.contains(name)) {
        addFile(entry, path, kLogFiles.contains(name) ? kBundleLogTailBytes : 0);
      } else {
        note(path + ": not packed");
      }
    }
  }

  void addRank(const fs::path& dir) {
    for (const fs::path& entry : sortedEntries(dir)) {
      const std::string name = entry.filename().string();
      const std::string path = inBundle(entry);
      if (kRankFiles.contains(name)) {
        addFile(entry, path, kLogFiles.contains(name) ? kBundleLogTailBytes : 0);
      } else {
        note(path + ": not packed");
      }
    }
  }

  // A file's name in the bundle: its path below the run directory.
  [[nodiscard]] std::string inBundle(const fs::path& file) const {
    return file.lexically_relative(runDir_).generic_string();
  }

  // report.json as its HTML page too; the event log --event_log wrote, found through run.json.
  void addDerived() {
    const fs::path report = runDir_ / "report.json";
    std::error_code ec;
    if (fs::exists(report, ec)) {
      std::ifstream in(report);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      auto page = reportHtml(text);
      if (page.isOk()) {
        add("report.html", text::redactSecrets(page.value()), "report.json as a page");
      } else {
        note("report.html: not made: " + page.status().message());
      }
    } else {
      note("report.json: none (the run had not ended, or its agent was killed)");
    }
    std::ifstream facts(runDir_ / "run.json");
    const auto record = nlohmann::json::parse(facts, nullptr, false);
    if (record.is_object() && record.value("event_log_file", "") != "") {
      addFile(record.value("event_log_file", ""), "events.jsonl", kEventLogTailBytes);
    }
  }

  std::vector<ArchiveFile> finish() {
    std::string head = "dtrun bundle of " + runDir_.string() + "\npacked by " + packedBy_ +
                       "\nLogs are their last " + std::to_string(kBundleLogTailBytes / 1024) +
                       " KiB. In every file, the value after a name ending in token or password "
                       "(DTRUN_STORE_TOKEN=, password=, any case) is replaced by <redacted>.\n"
                       "Files:\n";
    files_.insert(files_.begin(), ArchiveFile{top_ + "/MANIFEST.txt", head + manifest_});
    return std::move(files_);
  }

 private:
  fs::path runDir_;
  std::string top_;
  std::string packedBy_;
  std::string manifest_;
  std::vector<ArchiveFile> files_;
};

bool isAttemptDir(const fs::path& p) {
  std::error_code ec;
  return p.filename().string().starts_with("attempt_") && fs::is_directory(p, ec);
}

}  // namespace

Result<std::vector<ArchiveFile>> collectRunBundle(const fs::path& runDir,
                                                  std::string_view packedBy) {
  std::error_code ec;
  if (!fs::is_directory(runDir, ec)) {
    return Status::invalidArgument(runDir.string() +
                                   " is not a directory: give a run's <log_dir>/<run_id>");
  }
  fs::path dir = fs::absolute(runDir, ec).lexically_normal();
  if (dir.filename().empty()) {  // "run/": its name is the parent's
    dir = dir.parent_path();
  }
  const std::vector<fs::path> entries = sortedEntries(dir);
  const bool isRun =
      fs::exists(dir / "run.json", ec) || std::any_of(entries.begin(), entries.end(), isAttemptDir);
  if (!isRun) {
    return Status::invalidArgument(runDir.string() +
                                   " holds no dtrun run (no run.json, no attempt_N/): give "
                                   "<log_dir>/<run_id>, the directory dtrun's banner names");
  }
  BundleBuilder bundle(dir, packedBy);
  for (const fs::path& entry : entries) {
    const std::string name = entry.filename().string();
    if (isAttemptDir(entry)) {
      bundle.addAttempt(entry);
    } else if (kRunFiles.contains(name)) {
      bundle.addFile(entry, name);
    } else {
      bundle.note(name + ": not packed");
    }
  }
  bundle.addDerived();
  return bundle.finish();
}

}  // namespace dtrun::launcher
