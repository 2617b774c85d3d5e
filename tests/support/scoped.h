// Test helpers that undo themselves: a temporary directory, an environment variable set for a
// scope, and an argv for parsers that take (argc, argv) and for execv. Not thread-safe (the
// environment is process-wide).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

namespace dtrun::testing {

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path() / "dtrun-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) {
      path_ = pattern;
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets `name` to `value` (nullopt: unsets it) until the end of the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) {  // NOLINT(concurrency-mt-unsafe)
      previous_ = old;
    }
    set(value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { set(previous_); }

 private:
  void set(const std::optional<std::string>& value) const {
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

  std::string name_;
  std::optional<std::string> previous_;
};

// `program` followed by `args`, as (argc, argv) for a parser or a null-terminated argv for
// execv; the strings live as long as this.
class Argv {
 public:
  Argv(std::string program, const std::vector<std::string>& args) {
    strings_.push_back(std::move(program));
    strings_.insert(strings_.end(), args.begin(), args.end());
    for (std::string& s : strings_) {
      pointers_.push_back(s.data());
    }
    pointers_.push_back(nullptr);
  }
  Argv(const Argv&) = delete;
  Argv& operator=(const Argv&) = delete;
  [[nodiscard]] int argc() const { return static_cast<int>(strings_.size()); }
  [[nodiscard]] const char* const* argv() const { return pointers_.data(); }
  // exec's signature wants `char* const[]`; it writes to none of them.
  [[nodiscard]] char* const* execArgv() const { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;  // one per string, then nullptr
};

}  // namespace dtrun::testing
