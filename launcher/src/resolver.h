// Where each launch setting comes from: the command line, then PET_<DEST>, then what the batch
// scheduler supplied, then the caller's default. validate() asks it for every option.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "dtrun/common.h"

#include "launch_model.h"
#include "option_table.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {

// Resolves each option: command line, then PET_<DEST>, then the caller's default.
class Resolver {
 public:
  Resolver(const RawOptions& raw, const HostFacts& host) : raw_(raw), host_(host) {}

  // What the user said: the command line, then PET_<DEST>.
  [[nodiscard]] std::optional<Setting> given(std::string_view dest) const {
    if (const auto it = raw_.given.find(dest); it != raw_.given.end()) {
      return Setting{it->second, flagName(dest)};
    }
    const OptionSpec* spec = findSpec(dest);
    if (spec != nullptr && spec->hasEnv) {
      const std::string name = envName(dest);
      if (const auto it = host_.env.find(name); it != host_.env.end()) {
        return Setting{it->second, name};
      }
    }
    return std::nullopt;
  }

  // What the user said, else what the batch scheduler supplied.
  [[nodiscard]] std::optional<Setting> find(std::string_view dest) const {
    if (auto found = given(dest)) {
      return found;
    }
    if (const auto it = supplied_.find(dest); it != supplied_.end()) {
      return it->second;
    }
    return std::nullopt;
  }

  // A value from the batch scheduler, below anything the user gave. False when the user's wins.
  bool supply(std::string_view dest, Setting setting) {
    supplied_.insert_or_assign(std::string(dest), std::move(setting));
    return !given(dest).has_value();
  }

  [[nodiscard]] Setting get(std::string_view dest, std::string_view fallback) const {
    auto found = find(dest);
    return found ? *found : Setting{std::string(fallback), flagName(dest)};
  }

  // torchrun's check_env: a flag on the command line is true; else PET_<DEST> is an integer,
  // non-zero meaning true; else false.
  [[nodiscard]] Result<bool> flag(std::string_view dest) const {
    const auto found = find(dest);
    if (!found) {
      return false;
    }
    if (found->source.starts_with("--")) {
      return true;
    }
    const auto value = text::parseInt(found->text);
    if (!value) {
      return expected(*found, "1 or 0");
    }
    return *value != 0;
  }

  [[nodiscard]] std::optional<std::string> env(std::string_view name) const {
    if (const auto it = host_.env.find(name); it != host_.env.end()) {
      return it->second;
    }
    return std::nullopt;
  }

 private:
  const RawOptions& raw_;  // both outlive the Resolver, a local of validate()
  const HostFacts& host_;
  std::map<std::string, Setting, std::less<>> supplied_;
};
}  // namespace dtrun::launcher
