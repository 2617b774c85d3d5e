// `dtrun bundle RUN_DIR [--output FILE]`: a run directory packed into one tar archive
// (run_bundle.h), written whole or not at all.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <system_error>

#include <unistd.h>

#include "dtrun/launcher.h"

#include "report/run_bundle.h"
#include "report/tar_archive.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;

struct BundleCommandOptions {
  std::string runDir;
  std::string output;  // "" = ./dtrun-bundle-<run dir's name>.tar
  std::string packedBy;
};

int runBundle(const BundleCommandOptions& options) {
  auto files = collectRunBundle(options.runDir, options.packedBy);
  if (!files.isOk()) {
    std::cerr << "dtrun bundle: " << files.status().message() << "\n";
    return 2;
  }
  const std::string top =
      files.value().front().name.substr(0, files.value().front().name.find('/'));
  const fs::path out = options.output.empty() ? fs::path(top + ".tar") : fs::path(options.output);
  auto archive = tarArchive(files.value(), std::time(nullptr));
  if (!archive.isOk()) {
    std::cerr << "dtrun bundle: " << archive.status().message() << "\n";
    return 2;
  }
  // Beside the target, then renamed over it: a reader never sees half an archive.
  const fs::path partial = out.string() + ".partial";
  std::ofstream file(partial, std::ios::binary | std::ios::trunc);
  file << archive.value();
  file.close();
  std::error_code ec;
  if (!file) {
    const int err = errno;
    fs::remove(partial, ec);
    std::cerr << "dtrun bundle: cannot write " << out.string() << ": "
              << std::generic_category().message(err) << ": give --output a writable path\n";
    return 2;
  }
  fs::rename(partial, out, ec);
  if (ec) {
    fs::remove(partial, ec);
    std::cerr << "dtrun bundle: cannot write " << out.string() << ": " << ec.message()
              << ": give --output a writable path\n";
    return 2;
  }
  std::cout << "dtrun bundle: " << out.string() << " (" << files.value().size() << " files, "
            << (archive.value().size() + 1023) / 1024 << " KiB; see " << top
            << "/MANIFEST.txt in it)\n";
  return 0;
}

}  // namespace

std::function<int()> addBundleCommand(CLI::App& app, std::string_view versionLine) {
  auto options = std::make_shared<BundleCommandOptions>();
  options->packedBy = versionLine;
  CLI::App* bundle = app.add_subcommand(
      "bundle",
      "Pack a run directory (<log_dir>/<run_id>) into one tar archive for a bug report: "
      "command line, versions, each rank's environment and log tails, errors, stacks, the "
      "report; secrets redacted");
  bundle->add_option("run_dir", options->runDir, "The run's directory")->required();
  bundle->add_option("-o,--output", options->output,
                     "The archive to write (default: ./dtrun-bundle-<run dir's name>.tar)");
  return [bundle, options]() { return bundle->parsed() ? runBundle(*options) : -1; };
}

}  // namespace dtrun::launcher
