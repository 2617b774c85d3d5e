#include "report/report_html.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrun::launcher {
namespace {

using json = nlohmann::json;

std::string escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "2026-11-22T01:02:03.456Z" -> milliseconds since the epoch.
std::optional<double> parseTime(const json& value) {
  if (!value.is_string()) {
    return std::nullopt;
  }
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(value.get<std::string>().c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year,
                  &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) * 1000.0 + ms;
}

std::string number(double v) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.1f", v));
  return buffer.data();
}

std::string secs(double v) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.3f", v));
  return buffer.data();
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// How a rank ended: "exit code 3", "SIGKILL", "succeeded", "running".
std::string exitText(const json& rank) {
  const auto code = rank.value("exit_code", json());
  const auto sig = rank.value("signal", json());
  if (sig.is_string()) {
    return sig.get<std::string>();
  }
  if (code.is_number_integer()) {
    return code.get<int>() == 0 ? "succeeded" : "exit code " + std::to_string(code.get<int>());
  }
  return "no exit seen";
}

std::string exitClass(const json& rank, bool rootCause, const std::string& cause) {
  if (rootCause) {
    return cause == "hang" ? "hang" : "failed";
  }
  // dtrun stops the other ranks with SIGTERM (SIGKILL after the grace): the report gives them
  // signal and exit code 128+signal, and they did not fail.
  const auto sig = rank.value("signal", json());
  if (sig.is_string() &&
      (sig.get<std::string>() == "SIGTERM" || sig.get<std::string>() == "SIGKILL")) {
    return "stopped";
  }
  const auto code = rank.value("exit_code", json());
  if (code.is_number_integer()) {
    return code.get<int>() == 0 ? "ok" : "failed";
  }
  return "stopped";  // never reaped
}

constexpr double kLeft = 150;   // the rank labels
constexpr double kWidth = 900;  // the time axis
constexpr double kRight = 380;  // the cause texts
constexpr double kRow = 22;
constexpr double kTop = 30;

}  // namespace

Result<std::string> reportHtml(std::string_view reportJson) {
  const json report = json::parse(reportJson, nullptr, false);
  if (report.is_discarded() || !report.is_object()) {
    return Status::invalidArgument("not a JSON document: give the file --report wrote");
  }
  if (!report.contains("attempts") || !report["attempts"].is_array()) {
    return Status::invalidArgument(
        "no 'attempts' array: give the file --report wrote (docs/report.schema.json)");
  }
  const json& attempts = report["attempts"];
  const auto jobStart = parseTime(report.value("started_at", json()));
  if (!jobStart) {
    return Status::invalidArgument("no valid 'started_at': give the file --report wrote");
  }
  double jobEnd = parseTime(report.value("ended_at", json())).value_or(*jobStart);
  for (const auto& a : attempts) {
    jobEnd = std::max(jobEnd, parseTime(a.value("ended_at", json())).value_or(jobEnd));
  }
  const double span = std::max(jobEnd - *jobStart, 1.0);
  const auto x = [&](double t) { return kLeft + (t - *jobStart) / span * kWidth; };

  const json rootCause = report.value("root_cause", json());
  std::optional<int> rootRank;
  if (rootCause.is_object() && rootCause.contains("rank")) {
    rootRank = rootCause["rank"].get<int>();
  }
  // Rows: every rank any attempt had, with the host it ran on.
  std::map<int, std::string> rows;
  for (const auto& a : attempts) {
    for (const auto& r : a.value("ranks", json::array())) {
      const std::string host = str(r, "host").empty() ? str(a, "host") : str(r, "host");
      rows.emplace(r.value("rank", 0), host.empty() ? str(report, "host") : host);
    }
  }
  std::map<int, std::size_t> rowOf;
  for (const auto& [rank, host] : rows) {
    rowOf.emplace(rank, rowOf.size());
  }
  const double height = kTop + kRow * static_cast<double>(rows.size()) + 30;

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\" width=\"" +
         number(kLeft + kWidth + kRight) + "\" height=\"" + number(height) + "\">\n";
  // Rows and their labels.
  for (const auto& [rank, host] : rows) {
    const double y = kTop + kRow * static_cast<double>(rowOf[rank]);
    svg += "<g class=\"rank-row\" data-rank=\"" + std::to_string(rank) + "\">";
    svg += "<text class=\"label\" x=\"4\" y=\"" + number(y + 15) + "\">rank " +
           std::to_string(rank) + (host.empty() ? "" : " · " + escape(host)) + "</text>";
    svg += "<line class=\"grid\" x1=\"" + number(kLeft) + "\" x2=\"" + number(kLeft + kWidth) +
           "\" y1=\"" + number(y + kRow) + "\" y2=\"" + number(y + kRow) + "\"/></g>\n";
  }
  // Attempts: a bar per rank, restarts as dashed lines.
  std::map<int, std::string> causeOfRow;
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const json& a = attempts[i];
    const double start = parseTime(a.value("started_at", json())).value_or(*jobStart);
    const double end = parseTime(a.value("ended_at", json())).value_or(jobEnd);
    const std::string cause = str(a, "cause");
    const int number_ = a.value("attempt", static_cast<int>(i));
    if (i > 0) {
      svg += "<g class=\"restart\"><line x1=\"" + number(x(start)) + "\" x2=\"" + number(x(start)) +
             "\" y1=\"" + number(kTop - 12) + "\" y2=\"" + number(height - 24) + "\"/><text x=\"" +
             number(x(start) + 3) + "\" y=\"" + number(kTop - 14) + "\">attempt " +
             std::to_string(number_) + "</text></g>\n";
    }
    const bool last = i + 1 == attempts.size();
    for (const auto& r : a.value("ranks", json::array())) {
      const int rank = r.value("rank", 0);
      const bool isRoot = last && rootRank == rank;
      const std::string cls = exitClass(r, isRoot, cause);
      const double y = kTop + kRow * static_cast<double>(rowOf[rank]) + 3;
      const std::string tip = "rank " + std::to_string(rank) + ", attempt " +
                              std::to_string(number_) + ": " + exitText(r) + " (" + cause + ")";
      svg += "<rect class=\"attempt " + cls + "\" data-attempt=\"" + std::to_string(number_) +
             "\" x=\"" + number(x(start)) + "\" y=\"" + number(y) + "\" width=\"" +
             number(std::max(x(end) - x(start), 2.0)) + "\" height=\"" + number(kRow - 6) +
             "\"><title>" + escape(tip) + "</title></rect>\n";
      if (cls == "failed" || cls == "hang") {
        causeOfRow[rank] =
            "attempt " + std::to_string(number_) + ": " + exitText(r) + " (" + cause + ")";
      }
    }
  }
  // The hang's detection.
  const json hang = report.value("hang", json());
  if (hang.is_object()) {
    if (const auto at = parseTime(hang.value("detected_at", json()))) {
      svg += "<g class=\"hang-marker\"><line x1=\"" + number(x(*at)) + "\" x2=\"" + number(x(*at)) +
             "\" y1=\"" + number(kTop) + "\" y2=\"" + number(height - 24) + "\"/><text x=\"" +
             number(x(*at) + 3) + "\" y=\"" + number(height - 10) +
             "\">hang detected: " + escape(str(hang, "reason")) + "</text></g>\n";
    }
  }
  // The root cause's text beside its rank; other failures beside theirs.
  if (rootRank) {
    causeOfRow[*rootRank] =
        "root cause: " + exitText(rootCause) +
        (str(rootCause, "message").empty() ? std::string()
                                           : " — " + str(rootCause, "message").substr(0, 120));
  }
  for (const auto& [rank, text] : causeOfRow) {
    if (!rowOf.contains(rank)) {
      continue;
    }
    const double y = kTop + kRow * static_cast<double>(rowOf[rank]) + 15;
    svg += "<text class=\"cause\" data-rank=\"" + std::to_string(rank) + "\" x=\"" +
           number(kLeft + kWidth + 8) + "\" y=\"" + number(y) + "\">" + escape(text) + "</text>\n";
  }
  svg += "<text class=\"axis\" x=\"" + number(kLeft) + "\" y=\"" + number(height - 10) +
         "\">0 s</text><text class=\"axis\" x=\"" + number(kLeft + kWidth - 40) + "\" y=\"" +
         number(height - 10) + "\">" + secs(span / 1000.0) + " s</text>\n</svg>\n";

  // The attempts' table.
  std::string table =
      "<table id=\"attempts\"><tr><th>attempt</th><th>round</th><th>world "
      "size</th><th>duration (s)</th><th>cause</th><th>message</th></tr>\n";
  for (const auto& a : attempts) {
    const json round = a.value("round", json());
    const json duration = a.value("duration_s", json());
    table += "<tr class=\"" + escape(str(a, "cause")) + "\"><td>" +
             std::to_string(a.value("attempt", 0)) + "</td><td>" +
             (round.is_number() ? std::to_string(round.get<int>()) : "") + "</td><td>" +
             std::to_string(a.value("world_size", 0)) + "</td><td>" +
             (duration.is_number() ? secs(duration.get<double>()) : "") + "</td><td>" +
             escape(str(a, "cause")) + "</td><td>" + escape(str(a, "message")) + "</td></tr>\n";
  }
  table += "</table>\n";

  // Without --rdzv_id the run id is torchrun's "none": the entrypoint says more.
  const std::string runId = str(report, "run_id");
  const std::string title =
      (runId == "none" ? "dtrun: " + str(report, "entrypoint") : "dtrun run " + runId) + ": " +
      str(report, "outcome");
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                     escape(title) + "</title>\n<style>\n" +
                     "body{font:14px sans-serif;margin:16px;color:#222}"
                     "svg text{font:12px sans-serif}"
                     ".ok{fill:#4caf50}.failed{fill:#e53935}.hang{fill:#fb8c00}"
                     ".stopped{fill:#9e9e9e}.grid{stroke:#eee}"
                     ".restart line{stroke:#555;stroke-dasharray:4 3}"
                     ".hang-marker line{stroke:#fb8c00;stroke-width:2}"
                     ".cause{fill:#b71c1c}table{border-collapse:collapse;margin-top:12px}"
                     "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\n"
                     "</style></head><body>\n";
  page += "<h1>" + escape(title) + "</h1>\n<p id=\"summary\">entrypoint <code>" +
          escape(str(report, "entrypoint")) + "</code> on " + escape(str(report, "host")) +
          ", started " + escape(str(report, "started_at")) + ", " +
          std::to_string(attempts.size()) + " attempt(s), " + std::to_string(rows.size()) +
          " rank(s), exit code " + std::to_string(report.value("exit_code", 0)) + "</p>\n";
  if (rootRank) {
    page += "<p id=\"root-cause\">root cause: rank " + std::to_string(*rootRank) + " on " +
            escape(str(rootCause, "host")) + ", " + escape(exitText(rootCause)) + ": " +
            escape(str(rootCause, "message")) + "</p>\n";
  }
  if (hang.is_object()) {
    page += "<p id=\"hang\">hang: " + escape(str(hang, "summary")) + "</p>\n";
  }
  for (const json& s : report.value("stragglers", json::array())) {
    if (s.is_object()) {
      page += "<p class=\"straggler\">straggler: rank " + std::to_string(s.value("rank", 0)) +
              " on " + escape(str(s, "host")) + ", " + secs(s.value("late_s", 0.0)) +
              " s late in " + std::to_string(s.value("late_count", 0)) + " of " +
              std::to_string(s.value("judged", 0)) + " collectives (attempt " +
              std::to_string(s.value("attempt", 0)) + ")</p>\n";
    }
  }
  page += svg;
  page +=
      "<p class=\"legend\"><svg width=\"420\" height=\"16\"><rect class=\"ok\" width=\"12\" "
      "height=\"12\"/><text x=\"16\" y=\"11\">succeeded</text><rect class=\"failed\" "
      "x=\"90\" width=\"12\" height=\"12\"/><text x=\"106\" y=\"11\">failed</text><rect "
      "class=\"hang\" x=\"160\" width=\"12\" height=\"12\"/><text x=\"176\" "
      "y=\"11\">hang</text><rect class=\"stopped\" x=\"230\" width=\"12\" "
      "height=\"12\"/><text x=\"246\" y=\"11\">stopped by dtrun</text></svg></p>\n";
  page += table;
  page += "</body></html>\n";
  return page;
}

}  // namespace dtrun::launcher
