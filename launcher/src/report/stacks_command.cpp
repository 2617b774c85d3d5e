// `dtrun stacks ADDR`: every running worker's Python and native stacks, from the job's status
// endpoint (GET /stacks): the agent there dumps its workers (and, when it gathers the job, asks
// every other node for theirs) without stopping them, and answers one text grouped by identical
// stacks. Printed, or written to --output. The store token comes from --token or
// DTRUN_STORE_TOKEN.
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "dtrun/common.h"
#include "dtrun/launcher.h"

#include "report/status_client.h"
#include "text.h"

namespace dtrun::launcher {
namespace {

struct StacksOptions {
  std::string address;
  std::string token;
  double timeout = 90;  // beyond the agent's own wait for the other nodes (60 s)
  std::string output;
};

int runStacks(StacksOptions o) {
  if (o.token.empty()) {
    o.token = text::envText("DTRUN_STORE_TOKEN");
  }
  if (!(o.timeout >= 1 && o.timeout <= 3600)) {
    std::cerr << "dtrun stacks: --timeout expects seconds from 1 to 3600\n";
    return 2;
  }
  const auto answer = httpGet(o.address, "/stacks", o.token,
                              std::chrono::milliseconds(static_cast<long>(o.timeout * 1000)));
  if (!answer.isOk()) {
    std::cerr << "dtrun stacks: " << answer.status().message() << "\n";
    return answer.status().code() == Errc::kInvalidArgument ? 2 : 1;
  }
  const HttpAnswer& a = answer.value();
  if (a.status == 401) {
    std::cerr << "dtrun stacks: the job at " << o.address
              << " needs its store token: pass --token or set DTRUN_STORE_TOKEN\n";
    return 1;
  }
  if (a.status == 504) {
    std::cerr << "dtrun stacks: the agent at " << o.address
              << " did not gather the stacks in time: " << text::trim(a.body) << "\n";
    return 1;
  }
  if (a.status != 200 || !a.body.starts_with("dtrun stacks")) {
    std::cerr << "dtrun stacks: " << o.address << " answered " << a.status
              << " without dtrun's stacks (is it a dtrun --status_port?): "
              << text::trim(a.body.substr(0, 200)) << "\n";
    return 1;
  }
  if (o.output.empty()) {
    std::cout << a.body << std::flush;
    return 0;
  }
  std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
  out << a.body;
  out.close();
  if (!out) {
    std::cerr << "dtrun stacks: cannot write " << o.output << "\n";
    return 1;
  }
  std::cerr << "dtrun stacks: written to " << o.output << "\n";
  return 0;
}

}  // namespace

std::function<int()> addStacksCommand(CLI::App& app) {
  auto options = std::make_shared<StacksOptions>();
  CLI::App* stacks = app.add_subcommand(
      "stacks",
      "Every running worker's Python and native stacks from a job's --status_port (ADDR = "
      "HOST:PORT), grouped by identical stacks; the job runs on");
  stacks->add_option("address", options->address, "HOST:PORT of the job's status endpoint")
      ->required();
  stacks->add_option("--token", options->token,
                     "The job's store token (default: DTRUN_STORE_TOKEN)");
  stacks->add_option("--timeout", options->timeout, "Seconds to wait for the answer (default 90)");
  stacks->add_option("--output", options->output, "Write the stacks to FILE instead of stdout");
  return [stacks, options]() { return stacks->parsed() ? runStacks(*options) : -1; };
}

}  // namespace dtrun::launcher
