#include "log_options.h"

#include <utility>

#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {

using text::trim;

// Role, log directory, redirects, tee and the console filter.
Status resolveOutput(const Resolver& options, agent::AgentConfig& config) {
  const auto role = options.get("role", "default");
  if (trim(role.text).empty()) {
    return expected(role, "a non-empty role name");
  }
  config.role = role.text;
  config.logDir = options.get("log_dir", "").text;

  for (const auto& [dest, target] :
       {std::pair{"redirects", &config.redirects}, std::pair{"tee", &config.tee}}) {
    const auto setting = options.get(dest, "0");
    auto selection = parseStreamSelection(setting.text);
    if (!selection) {
      return expected(setting,
                      "0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs "
                      "like 0:3,1:1");
    }
    *target = std::move(*selection);
  }
  DTRUN_ASSIGN_OR_RETURN(auto filter, parseLocalRanksFilter(options.get("local_ranks_filter", "")));
  config.localRanksFilter = std::move(filter);

  auto prefix = options.find("log_line_prefix_template");
  if (!prefix) {
    if (const auto fromEnv = options.env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) {
      prefix = Setting{*fromEnv, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"};
    }
  }
  if (prefix) {
    if (const auto unknown = agent::unknownLinePrefixVariable(prefix->text); !unknown.empty()) {
      return Status::invalidArgument(prefix->source + ": unknown variable " + unknown + " in '" +
                                     prefix->text +
                                     "'; use ${role_name}, ${rank}, ${local_rank}, ${hostname} "
                                     "or ${pid}");
    }
    config.logLinePrefixTemplate = prefix->text;
  }
  for (const auto& [dest, target] :
       {std::pair{"duplicate_stdout_filters", &config.duplicateStdoutFilters},
        std::pair{"duplicate_stderr_filters", &config.duplicateStderrFilters}}) {
    *target = parseDuplicateFilters(options.get(dest, "").text);
  }
  return Status::ok();
}

// torchrun's --log_dir=/dev/null: no file at all. What needs files is refused; what only loses
// them (redirects, duplicate filters) is said once.
Status checkDiscardedLogs(const Resolver& options, LaunchPlan& plan) {
  if (!plan.config.discardsLogs()) {
    return Status::ok();
  }
  if (plan.config.hangTimeout.count() > 0) {
    return Status::invalidArgument(
        "--hang_timeout needs the per-rank progress files, and --log_dir=/dev/null writes no "
        "file: give --log_dir a directory, or leave --hang_timeout out");
  }
  for (const std::string_view dest :
       {"redirects", "duplicate_stdout_filters", "duplicate_stderr_filters"}) {
    if (const auto setting = options.find(dest);
        setting && !setting->text.empty() && setting->text != "0") {
      plan.warnings.push_back(
          setting->source + ": --log_dir=/dev/null writes no file; " +
          (dest == "redirects" ? "the streams stay on the console" : "no line is copied"));
    }
  }
  return Status::ok();
}

}  // namespace dtrun::launcher
