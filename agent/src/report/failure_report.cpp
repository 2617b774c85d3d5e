#include "report/failure_report.h"

#include <algorithm>
#include <array>
#include <ctime>
#include <deque>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "json_text.h"

namespace dtrun::agent::detail {
namespace {

constexpr std::size_t kStderrTailLines = 20;

std::string formatTime(std::chrono::system_clock::time_point time) {
  const std::time_t t = std::chrono::system_clock::to_time_t(time);
  std::tm local{};
  localtime_r(&t, &local);
  std::array<char, 32> buffer{};
  const std::size_t n = std::strftime(buffer.data(), buffer.size(), "%Y-%m-%d_%H:%M:%S", &local);
  return {buffer.data(), n};
}

std::string describeFailure(const WorkerFailure& f, const std::string& host) {
  std::ostringstream out;
  const int exitcode = f.status.signaled ? -f.status.code : f.status.code;
  out << "  time      : " << formatTime(f.time) << "\n"
      << "  host      : " << (f.host.empty() ? host : f.host)
      << (f.nodeRank >= 0 ? " (node " + std::to_string(f.nodeRank) + ")" : "") << "\n"
      << "  rank      : "
      << (f.rank < 0
              ? std::string("none (a hang no rank is to blame for)")
              : std::to_string(f.rank) + " (local_rank: " + std::to_string(f.localRank) + ")")
      << "\n"
      << "  exitcode  : " << exitcode << " (pid: " << f.pid << ")\n"
      << "  error_file: " << (f.errorFile.empty() ? "<N/A>" : f.errorFile) << "\n";
  std::string message = f.message;
  if (message.empty()) {
    message = f.status.signaled
                  ? "Signal " + std::to_string(f.status.code) + " (" + signalName(f.status.code) +
                        ") received by PID " + std::to_string(f.pid)
                  : "(the worker wrote nothing to stderr and no error file)";
  }
  // Continuation lines are indented under "traceback :" as torchrun does.
  std::string indented;
  std::istringstream lines(message);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    indented += (first ? "" : "\n    ") + line;
    first = false;
  }
  out << "  traceback : " << indented << "\n";
  return out.str();
}

}  // namespace

std::string encodeFailure(const WorkerFailure& f) {
  return jsonText(nlohmann::json{
      {"rank", f.rank},
      {"local_rank", f.localRank},
      {"pid", f.pid},
      {"signaled", f.status.signaled},
      {"code", f.status.code},
      {"time_ms",
       std::chrono::duration_cast<std::chrono::milliseconds>(f.time.time_since_epoch()).count()},
      {"error_file", f.errorFile},
      {"message", f.message},
      {"host", f.host},
      {"node_rank", f.nodeRank}});
}

std::optional<WorkerFailure> decodeFailure(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    WorkerFailure f;
    f.rank = j.at("rank").get<int>();
    f.localRank = j.at("local_rank").get<int>();
    f.pid = j.at("pid").get<pid_t>();
    f.status.signaled = j.at("signaled").get<bool>();
    f.status.code = j.at("code").get<int>();
    f.time = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(j.at("time_ms").get<std::int64_t>()));
    f.errorFile = j.at("error_file").get<std::string>();
    f.message = j.at("message").get<std::string>();
    f.host = j.at("host").get<std::string>();
    f.nodeRank = j.at("node_rank").get<int>();
    return f;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

bool readErrorFile(const std::string& path, WorkerFailure& failure) {
  std::ifstream in(path);
  if (!in) {
    return false;
  }
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) {
    return false;
  }
  const auto& message = json["message"];
  std::string text;
  if (message.is_string()) {  // legacy form
    text = message.get<std::string>();
  } else if (message.is_object()) {
    text = message.value("message", "");
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
      const std::string stack = message["extraInfo"].value("py_callstack", "");
      text = stack.empty() ? text : stack;
    }
  } else {
    return false;
  }
  failure.errorFile = path;
  failure.message = text;
  const auto asks = [](const nlohmann::json& object) {
    return object.is_object() && object.contains("no_restart") &&
           object["no_restart"].is_boolean() && object["no_restart"].get<bool>();
  };
  failure.noRestart = asks(json) || asks(message);
  return true;
}

std::string tailOfFile(const std::string& path, std::size_t maxLines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return {};
  }
  // Only the end matters: skip to the last 64 KiB of a large log.
  constexpr std::streamoff kWindow = std::streamoff{64} * 1024;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - kWindow));
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > maxLines) {
      lines.pop_front();
    }
  }
  std::string out;
  for (const auto& l : lines) {
    out += (out.empty() ? "" : "\n") + l;
  }
  return out;
}

void describeFromFiles(WorkerFailure& failure, const std::filesystem::path& dir) {
  if (dir.empty()) {                 // --log_dir=/dev/null: the worker had neither
    if (!failure.status.signaled) {  // (a signal's own line says more)
      failure.message = "(--log_dir=/dev/null: no error file or stderr log was kept)";
    }
    return;
  }
  if (!readErrorFile((dir / "error.json").string(), failure)) {
    failure.message = tailOfFile((dir / "stderr.log").string(), kStderrTailLines);
  }
  if (!failure.status.killedBy.empty()) {  // the worker's own last words cannot say it
    failure.message =
        failure.status.killedBy + (failure.message.empty() ? "" : "\n" + failure.message);
  }
}

std::string formatFailureReport(const std::string& entrypoint, const std::string& host,
                                std::vector<WorkerFailure> failures) {
  std::stable_sort(failures.begin(), failures.end(),
                   [](const WorkerFailure& a, const WorkerFailure& b) { return a.time < b.time; });
  const std::string rule(60, '=');
  const std::string thin(60, '-');
  std::ostringstream out;
  out << rule << "\n" << entrypoint << " FAILED\n" << thin << "\nFailures:\n";
  if (failures.size() <= 1) {
    out << "  <NO_OTHER_FAILURES>\n";
  }
  for (std::size_t i = 1; i < failures.size(); ++i) {
    out << "[" << i << "]:\n" << describeFailure(failures[i], host);
  }
  out << thin << "\nRoot Cause (first observed failure):\n[0]:\n";
  if (!failures.empty()) {
    out << describeFailure(failures.front(), host);
  }
  out << rule << "\n";
  return out.str();
}

}  // namespace dtrun::agent::detail
