#include "host_facts.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tcp_probe.h"
#include "text.h"
#include "value_parsers.h"

extern char** environ;  // NOLINT(readability-identifier-naming): POSIX spells it so

namespace dtrun::launcher {
namespace {

using text::isDigits;
using text::split;

std::string randomRunId() {
  std::random_device device;
  std::array<unsigned, 16> bytes{};
  for (unsigned& b : bytes) {
    b = device() & 0xffU;
  }
  bytes[6] = (bytes[6] & 0x0fU) | 0x40U;  // version 4
  bytes[8] = (bytes[8] & 0x3fU) | 0x80U;  // RFC 4122 variant
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string id;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      id += '-';
    }
    id += kHex[bytes[i] >> 4U];
    id += kHex[bytes[i] & 0x0fU];
  }
  return id;
}

bool isExecutableFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// The numeric text of an address (IPv4 or IPv6), for comparing names that resolve alike.
std::string addressText(const sockaddr* address) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  const void* raw =
      address->sa_family == AF_INET
          ? static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in*>(address)->sin_addr)  // NOLINT
          : static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);  // NOLINT
  return ::inet_ntop(address->sa_family, raw, text.data(), text.size()) != nullptr ? text.data()
                                                                                   : "";
}

bool isThisMachine(const std::string& name) {
  std::array<char, 256> own{};
  if (name == "localhost" ||
      (::gethostname(own.data(), own.size() - 1) == 0 && name == own.data())) {
    return true;
  }
  std::set<std::string> local;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) == 0) {
    for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr != nullptr &&
          (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
        local.insert(addressText(i->ifa_addr));
      }
    }
    ::freeifaddrs(interfaces);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) {
    return false;
  }
  bool mine = false;
  for (const addrinfo* a = found; a != nullptr && !mine; a = a->ai_next) {
    const std::string text = addressText(a->ai_addr);
    mine = local.count(text) != 0 || text.starts_with("127.") || text == "::1";
  }
  ::freeaddrinfo(found);
  return mine;
}

// An installed dtrun's share/dtrun/python first: a build tree that moved keeps working from its
// install, and an install never reaches back into a source tree that may be gone.
std::string findPythonHookDir() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) {
    candidates.push_back(self.parent_path().parent_path() / "share" / "dtrun" / "python");
  }
  candidates.emplace_back(DTRUN_SOURCE_PYTHON_DIR);
  for (const auto& dir : candidates) {
    if (std::filesystem::is_regular_file(dir / "sitecustomize.py", ec)) {
      return dir.string();
    }
  }
  return {};
}

// An installed dtrun's bin/dtrun-netcheck first, then the build tree's netcheck/ beside
// launcher/ (as for the Python hook: an install never reaches back into a build tree).
std::string findNetcheckProgram() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return {};
  }
  for (const auto& path : {self.parent_path() / "dtrun-netcheck",
                           self.parent_path().parent_path() / "netcheck" / "dtrun-netcheck"}) {
    if (std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0) {
      return path.string();
    }
  }
  return {};
}

}  // namespace

std::vector<std::string> environSnapshot() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

HostFacts readHostFacts() {
  HostFacts host;
  host.fileExists = [](const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
  };
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals != std::string_view::npos) {
      host.env.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  int deviceNodes = 0;
  std::error_code ec;
  for (const auto& node : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = node.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && isDigits(name.substr(6))) {
      ++deviceNodes;
    }
  }
  // $DTRUN_SYSFS_ROOT: a recorded machine (tests/placement/topologies) stands in for this one,
  // whole: its CPUs, cpuset and GPUs, not this process's affinity or /dev's GPUs.
  const auto sysRoot = host.env.find("DTRUN_SYSFS_ROOT");
  if (sysRoot != host.env.end()) {
    host.readTopology = [root = sysRoot->second] {
      return placement::readTopology(root, placement::ProcessView{});
    };
  } else {
    host.readTopology = [] {
      placement::ProcessView view;
      cpu_set_t set;
      CPU_ZERO(&set);
      if (::sched_getaffinity(0, sizeof set, &set) == 0) {
        view.affinity.emplace();
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
          if (CPU_ISSET(cpu, &set)) {
            view.affinity->push_back(cpu);
          }
        }
      }
      std::ifstream cgroup("/proc/self/cgroup");
      std::ostringstream text;
      text << cgroup.rdbuf();
      view.cgroup = text.str();
      return placement::readTopology("/sys", view);
    };
  }
  if (sysRoot != host.env.end()) {
    const auto recorded = host.readTopology();
    deviceNodes = recorded.isOk() ? static_cast<int>(recorded.value().gpus.size()) : 0;
  }
  // torch counts what CUDA_VISIBLE_DEVICES lets it see; SLURM names a step's GPUs when it did
  // not set that variable itself.
  std::optional<std::string> named;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (const auto it = host.env.find(name); it != host.env.end() && !named) {
      named = it->second;
    }
  }
  host.deviceNodes = deviceNodes;
  host.gpuCount = countVisibleGpus(deviceNodes, named);
  host.cpuCount = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const auto path = host.env.find("PATH");
  const std::string searchPath =
      path == host.env.end() ? "/usr/local/bin:/usr/bin:/bin" : path->second;
  host.findExecutable = [searchPath](const std::string& entry) -> std::optional<std::string> {
    if (entry.find('/') != std::string::npos) {
      return isExecutableFile(entry) ? std::optional(entry) : std::nullopt;
    }
    if (isExecutableFile(entry)) {
      return "./" + entry;  // a program in the working directory, as its name was meant
    }
    for (const std::string_view dir : split(searchPath, ':')) {
      const std::string candidate =
          (dir.empty() ? std::string(".") : std::string(dir)) + "/" + entry;
      if (isExecutableFile(candidate)) {
        return entry;  // the agent looks the name up in PATH
      }
    }
    return std::nullopt;
  };
  // The PATH the workers inherit, searched as the agent searched it before the launcher did:
  // nothing when unset, and no working directory for a trailing ':'.
  const std::string workerPath = path == host.env.end() ? "" : path->second;
  host.resolveProgram = [workerPath](const std::string& program) -> std::optional<std::string> {
    if (program.find('/') != std::string::npos) {
      return program;  // exec says what is wrong with it, if anything
    }
    std::vector<std::string_view> dirs = split(workerPath, ':');
    if (dirs.back().empty()) {
      dirs.pop_back();
    }
    for (const std::string_view dir : dirs) {
      std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + program;
      if (isExecutableFile(candidate)) {
        return candidate;
      }
    }
    return std::nullopt;
  };
  host.makeRunId = randomRunId;
  host.isThisHost = isThisMachine;
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) == 0) {
    host.hostName = name.data();
  }
  host.pythonHookDir = findPythonHookDir();
  host.netcheckProgram = findNetcheckProgram();
  host.whyNotRunnable = [](const std::string& file) -> std::string {
    struct stat info {};
    if (::stat(file.c_str(), &info) != 0) {
      return "No such file or directory";
    }
    if (S_ISDIR(info.st_mode)) {
      return "it is a directory, not a program (name the program inside it)";
    }
    if (!S_ISREG(info.st_mode) || ::access(file.c_str(), X_OK) != 0) {
      return "not executable (chmod +x " + file + ", or name its interpreter: dtrun ... python3 " +
             file + ")";
    }
    return {};
  };
  host.acceptsConnection = [](const std::string& address, int port) {
    return acceptsConnection(address, static_cast<std::uint16_t>(port), std::chrono::seconds(1))
        .isOk();
  };
  host.whyNotWritable = [](const std::string& file) -> std::string {
    const std::filesystem::path target(file);
    std::error_code error;
    if (std::filesystem::is_directory(target, error)) {
      return "it is a directory (name a file inside it)";
    }
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    if (!std::filesystem::is_directory(dir, error)) {
      return "its directory " + dir.string() + " does not exist (create it first)";
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return "its directory " + dir.string() + " is not writable by this user";
    }
    return {};
  };
  host.readFile = [](const std::string& file) -> std::optional<std::string> {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return std::nullopt;
    }
    std::ostringstream text;
    text << in.rdbuf();
    return in.bad() ? std::nullopt : std::optional(text.str());
  };
  return host;
}
}  // namespace dtrun::launcher
