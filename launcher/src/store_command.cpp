// `dtrun store`: a rendezvous store (and keeper) served alone, until SIGINT, SIGTERM or SIGHUP.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <sys/resource.h>

#include "dtrun/launcher.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "host_facts.h"
#include "log.h"
#include "option_table.h"
#include "rendezvous_options.h"
#include "signal_mask.h"

namespace dtrun::launcher {
namespace {

struct StoreCommandOptions {
  std::string host;
  int port = 29400;
  std::string portFile;
  std::string tokenFile;
  std::size_t maxValueLength = std::size_t{8} * 1024 * 1024;
  std::size_t maxConnections = rdzv::ServerOptions{}.maxConnections;
  std::size_t maxReplyBacklog = rdzv::ServerOptions{}.maxReplyBacklog;
  std::string logLevel;
};

// Each connection is a file descriptor: lift the soft limit to the hard one (Debian's soft
// default, 1024, would refuse clients long before --max-connections) and say when even the hard
// limit is below what was asked for.
void raiseFileLimit(std::size_t maxConnections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return;
  }
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  constexpr rlim_t kSpareDescriptors = 64;  // logs, the listener, the keeper's own client
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < maxConnections + kSpareDescriptors) {
    log::rdzv().warn(
        "file descriptor limit {} is below --max-connections {}: accepting fails past about {} "
        "clients (raise it with ulimit -n or systemd's LimitNOFILE)",
        limit.rlim_cur, maxConnections,
        limit.rlim_cur > kSpareDescriptors ? limit.rlim_cur - kSpareDescriptors : 0);
  }
}

// Writes atomically (temp file + rename) so a reader polling for the file never sees it half done.
Status writePortFile(const std::string& path, std::uint16_t port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << port << "\n";
    if (!out) {
      return Status::invalidArgument("--port-file: cannot write '" + temp + "'");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return Status::system("--port-file: rename to '" + path + "'", errno);
  }
  return Status::ok();
}

int runStore(const StoreCommandOptions& options) {
  log::init(options.logLevel);
  // Block the stop signals in every thread (the server's inherits this mask) and take them with
  // sigwait, so no handler runs in signal context.
  const sigset_t stopSignals = signals::block({SIGINT, SIGTERM, SIGHUP});
  raiseFileLimit(options.maxConnections);

  std::vector<std::pair<std::string, std::string>> conf;
  if (!options.tokenFile.empty()) {
    conf.emplace_back("token_file", options.tokenFile);
  }
  auto token = resolveStoreToken(conf, readHostFacts());
  if (!token.isOk()) {
    std::cerr << "dtrun store: " << token.status().message() << "\n";
    return 2;
  }
  rdzv::ServerOptions serverOptions;
  serverOptions.token = token.value();
  serverOptions.host = options.host;
  serverOptions.port = static_cast<std::uint16_t>(options.port);
  serverOptions.maxValueLength = options.maxValueLength;
  serverOptions.maxConnections = options.maxConnections;
  serverOptions.maxReplyBacklog = options.maxReplyBacklog;
  auto server = rdzv::StoreServer::start(serverOptions);
  if (!server.isOk()) {
    std::cerr << "dtrun store: " << server.status().message()
              << " (pick another --port, or 0 for any free port)\n";
    return 1;
  }
  const std::uint16_t port = server.value()->port();
  if (!options.portFile.empty()) {
    if (auto s = writePortFile(options.portFile, port); !s.isOk()) {
      std::cerr << "dtrun store: " << s.message() << "\n";
      return 1;
    }
  }
  // Multi-node jobs whose --rdzv_endpoint is this store get their keeper here. Its connections
  // go to --host when the store listens on that address alone.
  const bool everyAddress =
      options.host.empty() || options.host == "0.0.0.0" || options.host == "::";
  auto keepers = rdzv::KeeperService::start(port, serverOptions.token,
                                            everyAddress ? "127.0.0.1" : options.host);
  if (!keepers.isOk()) {
    std::cerr << "dtrun store: " << keepers.status().message() << "\n";
    return 1;
  }
  std::cout << "dtrun store: listening on port " << port << std::endl;
  int signal = 0;
  sigwait(&stopSignals, &signal);
  log::rdzv().info("store stopping on signal {}", signal);
  keepers.value().reset();
  server.value()->stop();
  return 0;
}

}  // namespace

std::function<int()> addStoreCommand(CLI::App& app) {
  auto options = std::make_shared<StoreCommandOptions>();
  CLI::App* store = app.add_subcommand(
      "store", "Serve a rendezvous store (TCPStore-compatible) alone, until SIGINT or SIGTERM");
  store->add_option("--host", options->host,
                    "Address to listen on; empty listens on every IPv6 and IPv4 address");
  store->add_option("--port", options->port, "Port to listen on; 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  store->add_option("--port-file,--port_file", options->portFile,
                    "Write the bound port to this file once listening");
  store->add_option("--token-file,--token_file", options->tokenFile,
                    "Require clients to prove the token in this file (also: DTRUN_STORE_TOKEN, "
                    "DTRUN_STORE_TOKEN_FILE)");
  store
      ->add_option("--max-value-bytes,--max_value_bytes", options->maxValueLength,
                   "Largest value a client may store")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 31));
  store
      ->add_option("--max-connections,--max_connections", options->maxConnections,
                   "Clients served at once; more are refused with a warning")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  store
      ->add_option("--max-reply-backlog,--max_reply_backlog", options->maxReplyBacklog,
                   "Bytes of unread replies per client before the store stops reading its "
                   "requests (and drops it if events pile up as much again)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  store
      ->add_option("--log-level,--log_level", options->logLevel,
                   "trace, debug, info, warn, error, critical or off (default: DTRUN_LOG_LEVEL or "
                   "info)")
      ->check(CLI::IsMember(optionValues("log_level")));  // the top level's --log-level words
  return [store, options]() { return store->parsed() ? runStore(*options) : -1; };
}

}  // namespace dtrun::launcher
