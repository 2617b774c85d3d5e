// `dtrun report FILE --html OUT`: renders a run report (report_html.h).
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "dtrun/launcher.h"

#include "report/report_html.h"

namespace dtrun::launcher {
namespace {

struct ReportCommandOptions {
  std::string report;
  std::string html;
};

int runReport(const ReportCommandOptions& options) {
  std::ifstream in(options.report);
  if (!in) {
    std::cerr << "dtrun report: cannot read " << options.report
              << ": give the file dtrun --report=FILE wrote\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto page = reportHtml(text.str());
  if (!page.isOk()) {
    std::cerr << "dtrun report: " << options.report << ": " << page.status().message() << "\n";
    return 2;
  }
  if (options.html == "-") {  // the page on stdout, as other tools take "-"
    std::cout << page.value();
    return std::cout ? 0 : 2;
  }
  std::ofstream out(options.html, std::ios::trunc);
  out << page.value();
  out.close();
  if (!out) {
    std::cerr << "dtrun report: cannot write " << options.html << ": give a writable path\n";
    return 2;
  }
  std::cout << "dtrun report: " << options.html << "\n";
  return 0;
}

}  // namespace

std::function<int()> addReportCommand(CLI::App& app) {
  auto options = std::make_shared<ReportCommandOptions>();
  CLI::App* report = app.add_subcommand(
      "report", "Render a run report (dtrun --report=FILE) as one self-contained HTML page");
  report->add_option("file", options->report, "The run report (JSON)")->required();
  report->add_option("--html", options->html, "Write the HTML page here (- for stdout)")
      ->required();
  return [report, options]() { return report->parsed() ? runReport(*options) : -1; };
}

}  // namespace dtrun::launcher
