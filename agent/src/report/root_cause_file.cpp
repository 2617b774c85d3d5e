#include "report/root_cause_file.h"

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "json_text.h"
#include "log.h"
#include "report/run_report.h"

namespace dtrun::agent::detail {
namespace {

// torch's ProcessFailure.exitcode: negative for a signal.
int torchExitCode(const ExitStatus& status) { return status.signaled ? -status.code : status.code; }

}  // namespace

std::string rootCauseErrorJson(const WorkerFailure& root, const std::string& host,
                               const std::optional<std::string>& childError) {
  if (childError) {
    auto copied = nlohmann::json::parse(*childError, nullptr, /*allow_exceptions=*/false);
    if (!copied.is_discarded() && copied.is_object() && copied.contains("message")) {
      // The worker cannot know its own code when a signal killed it: torch adds it here, and
      // only to the structured form (a legacy string message is copied untouched).
      if (copied["message"].is_object() && torchExitCode(root.status) != 0) {
        copied["message"]["errorCode"] = torchExitCode(root.status);
      }
      return jsonText(copied);
    }
  }
  const std::string where = root.host.empty() ? host : root.host;
  const std::string summary = "rank " + std::to_string(root.rank) + " (local_rank " +
                              std::to_string(root.localRank) + ") on " + where +
                              " failed: " + root.status.describe() +
                              (root.pid > 0 ? " (pid " + std::to_string(root.pid) + ")" : "");
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(root.time.time_since_epoch()).count();
  return jsonText(
      nlohmann::json{{"message",
                      {{"message", summary},
                       {"extraInfo",
                        {{"py_callstack", root.message.empty() ? summary : root.message},
                         {"timestamp", std::to_string(seconds)}}},
                       {"errorCode", torchExitCode(root.status)}}}});
}

std::string signalErrorJson(int pid, int signal) {
  const std::string message =
      "SignalException: Process " + std::to_string(pid) + " got signal: " + std::to_string(signal);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return jsonText(nlohmann::json{
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", message}, {"timestamp", std::to_string(seconds)}}}}}});
}

void writeErrorFile(const std::string& path, const std::string& json) {
  if (writeFileAtomically(path, json)) {
    log::agent().info("error written to TORCHELASTIC_ERROR_FILE {}", path);
  } else {
    log::agent().warn("cannot write to TORCHELASTIC_ERROR_FILE {}: {}", path,
                      std::error_code(errno, std::generic_category()).message());
  }
}

void writeRootCauseErrorFile(const std::string& path, const WorkerFailure& root,
                             const std::string& host) {
  std::optional<std::string> childError;
  if (!root.errorFile.empty()) {
    std::ifstream in(root.errorFile, std::ios::binary);
    std::ostringstream text;
    if (in && (text << in.rdbuf())) {
      childError = text.str();
    }
  }
  writeErrorFile(path, rootCauseErrorJson(root, host, childError));
}

}  // namespace dtrun::agent::detail
