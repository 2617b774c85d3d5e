// A real etcd (Debian's /usr/bin/etcd) for tests: one member or an N-member cluster on free
// loopback ports, its data on tmpfs when there is one, optionally with TLS (certificates made
// with the openssl CLI: a CA, a server certificate for IP 127.0.0.1, a client certificate and a
// CA that signed neither) and user/password auth. Members are stopped by pid (SIGKILL, one at a
// time on demand for failover tests). Not thread-safe.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrun/etcd.h"

#include "support/scoped.h"

namespace dtrun::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";
inline constexpr const char* kEtcdctlBinary = "/usr/bin/etcdctl";

// Tests that need etcd WARN and return when this is false (scripts/setup.sh installs it).
inline bool etcdAvailable() {
  return ::access(kEtcdBinary, X_OK) == 0 && ::access(kEtcdctlBinary, X_OK) == 0;
}

// A loopback TCP port that was free a moment ago, below the kernel's range for connections' own
// ports: on a busy test machine a port from that range may become some connection's meanwhile.
inline int freeLoopbackPort() {
  int low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
      !(range >> low) || low < 11000) {
    low = 32768;
  }
  std::mt19937 pick(std::random_device{}());
  std::uniform_int_distribution<int> ports(10000, low - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int port = ports(pick);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool bound =
        ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;  // NOLINT: sockets API
    ::close(fd);
    if (bound) {
      return port;
    }
  }
  throw std::runtime_error("no free loopback port below " + std::to_string(low));
}

// Runs argv[0] with `argv` (stdout and stderr to `log`), waits up to `timeout`; returns the exit
// code (or -1 when it had to be killed).
inline int runProgram(const std::vector<std::string>& argv, const std::string& log,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const Argv args(argv.front(), {argv.begin() + 1, argv.end()});
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv.front().c_str(), args.execArgv());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string readFileText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct EtcdClusterOptions {
  int members = 1;
  bool tls = false;  // https client URLs; clients must show a certificate of the CA
  bool requireClientCert = true;
  bool auth = false;            // users root and "dtrun" (password kEtcdPassword), auth enabled
  int authTokenTtlSeconds = 0;  // > 0: etcd forgets an auth token unused this long
};

inline constexpr const char* kEtcdUser = "dtrun";
inline constexpr const char* kEtcdPassword = "s3cret-pw";

class EtcdCluster {
 public:
  explicit EtcdCluster(EtcdClusterOptions options = {}) : options_(options) {
    // tmpfs makes etcd's fsyncs free: a cluster starts in about a second.
    std::string pattern =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm/dtrun-etcd-XXXXXX" : "";
    if (pattern.empty() || ::mkdtemp(pattern.data()) == nullptr) {
      pattern = (fallback_.path() / "etcd").string();
      std::filesystem::create_directories(pattern);
    }
    dir_ = pattern;
    if (options_.tls) {
      makeCertificates();
    }
    std::string lastError;
    for (int attempt = 0; attempt < 3; ++attempt) {  // a port taken meanwhile: new ports
      try {
        start();
        if (options_.auth) {
          enableAuth();
        }
        return;
      } catch (const std::runtime_error& e) {
        lastError = e.what();
        stopAll();
      }
    }
    throw std::runtime_error(lastError);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;
  EtcdCluster(EtcdCluster&&) = delete;
  EtcdCluster& operator=(EtcdCluster&&) = delete;
  ~EtcdCluster() {
    stopAll();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // "127.0.0.1:port" of each member's client URL.
  [[nodiscard]] std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const auto& m : members_) {
      out.push_back("127.0.0.1:" + std::to_string(m.clientPort));
    }
    return out;
  }
  [[nodiscard]] std::string endpoint(int i) const { return endpoints().at(i); }

  // Options that reach every member: the CA and client certificate with TLS, the user with auth.
  [[nodiscard]] rdzv::EtcdOptions clientOptions(
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    rdzv::EtcdOptions o;
    o.endpoints = endpoints();
    o.timeout = timeout;
    if (options_.tls) {
      o.caFile = caFile();
      o.certFile = certFile();
      o.keyFile = keyFile();
    }
    if (options_.auth) {
      o.user = kEtcdUser;
      o.password = kEtcdPassword;
    }
    return o;
  }

  [[nodiscard]] std::string caFile() const { return (dir_ / "ca.pem").string(); }
  [[nodiscard]] std::string certFile() const { return (dir_ / "client.pem").string(); }
  [[nodiscard]] std::string keyFile() const { return (dir_ / "client.key").string(); }
  [[nodiscard]] std::string wrongCaFile() const { return (dir_ / "wrong-ca.pem").string(); }
  [[nodiscard]] pid_t pid(int i) const { return members_.at(i).pid; }
  [[nodiscard]] int size() const { return static_cast<int>(members_.size()); }

  // kill -9 of member i (and reaping it): what a crashed host looks like to the others.
  void killMember(int i) {
    auto& m = members_.at(i);
    if (m.pid > 0) {
      ::kill(m.pid, SIGKILL);
      int status = 0;
      ::waitpid(m.pid, &status, 0);
      m.pid = -1;
    }
  }

  // Member i, killed before, starts again on its ports and data (an etcd restarted by its
  // supervisor); waits until it answers.
  void restartMember(int i) {
    auto& m = members_.at(i);
    if (m.pid <= 0) {
      m.pid = spawn(m.argv, dir_ / ("member" + std::to_string(i) + ".log"));
      waitReady();
    }
  }

  // The last lines member i logged (for a failure message).
  [[nodiscard]] std::string logTail(int i) const {
    const std::string text = readFileText(dir_ / ("member" + std::to_string(i) + ".log"));
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

 private:
  struct Member {
    int clientPort = 0;
    int peerPort = 0;
    pid_t pid = -1;
    std::vector<std::string> argv;  // as started, for restartMember
  };

  [[nodiscard]] std::string scheme() const { return options_.tls ? "https://" : "http://"; }

  void start() {
    members_.assign(static_cast<std::size_t>(options_.members), Member{});
    std::string cluster;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      members_[i].clientPort = freeLoopbackPort();
      members_[i].peerPort = freeLoopbackPort();
      cluster += (i > 0 ? "," : "") + name(i) +
                 "=http://127.0.0.1:" + std::to_string(members_[i].peerPort);
    }
    const std::string token = "dtrun-test-" + std::to_string(::getpid()) + "-" +
                              std::to_string(members_.front().clientPort);
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const auto& m = members_[i];
      const std::string client = scheme() + "127.0.0.1:" + std::to_string(m.clientPort);
      const std::string peer = "http://127.0.0.1:" + std::to_string(m.peerPort);
      const auto data = dir_ / (name(i) + ".data");
      std::error_code ec;
      std::filesystem::remove_all(data, ec);
      std::vector<std::string> argv{kEtcdBinary,
                                    "--name=" + name(i),
                                    "--data-dir=" + data.string(),
                                    "--listen-client-urls=" + client,
                                    "--advertise-client-urls=" + client,
                                    "--listen-peer-urls=" + peer,
                                    "--initial-advertise-peer-urls=" + peer,
                                    "--initial-cluster=" + cluster,
                                    "--initial-cluster-token=" + token,
                                    "--initial-cluster-state=new",
                                    "--heartbeat-interval=25",
                                    "--election-timeout=250",
                                    "--snapshot-count=10000",
                                    "--quota-backend-bytes=268435456",
                                    "--logger=zap",
                                    "--log-level=error"};
      if (options_.authTokenTtlSeconds > 0) {
        argv.push_back("--auth-token-ttl=" + std::to_string(options_.authTokenTtlSeconds));
      }
      if (options_.tls) {
        argv.push_back("--cert-file=" + (dir_ / "server.pem").string());
        argv.push_back("--key-file=" + (dir_ / "server.key").string());
        argv.push_back("--trusted-ca-file=" + caFile());
        if (options_.requireClientCert) {
          argv.emplace_back("--client-cert-auth");
        }
      }
      members_[i].pid = spawn(argv, dir_ / ("member" + std::to_string(i) + ".log"));
      members_[i].argv = std::move(argv);
    }
    waitReady();
  }

  static std::string name(std::size_t i) { return "m" + std::to_string(i); }

  static pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log) {
    const Argv args(argv.front(), {argv.begin() + 1, argv.end()});
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv.front().c_str(), args.execArgv());
      ::_exit(127);
    }
    if (pid < 0) {
      throw std::runtime_error("fork failed");
    }
    return pid;
  }

  // Every member answers a linearizable read (so the cluster has a leader), within 30 s.
  void waitReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (std::size_t i = 0; i < members_.size(); ++i) {
      for (;;) {
        int status = 0;
        if (::waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
          members_[i].pid = -1;
          throw std::runtime_error("etcd member " + std::to_string(i) +
                                   " exited at start: " + logTail(static_cast<int>(i)));
        }
        auto options = clientOptions(std::chrono::milliseconds(1000));
        options.endpoints = {endpoint(static_cast<int>(i))};
        options.user.clear();  // auth comes later
        options.password.clear();
        if (auto client = rdzv::EtcdClient::connect(options); client.isOk()) {
          if (client.value()->get("probe").isOk()) {
            break;
          }
        }
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("etcd member " + std::to_string(i) + " at " +
                                   endpoint(static_cast<int>(i)) +
                                   " did not answer within 30 s: " + logTail(static_cast<int>(i)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  // Auth is still off while the tests' setup runs it: no user needed.
  void etcdctl(const std::vector<std::string>& args) {
    // etcdctl 3.4 speaks v3 only when told.
    std::vector<std::string> argv{"/usr/bin/env",      "ETCDCTL_API=3",
                                  kEtcdctlBinary,      "--endpoints=" + endpoint(0),
                                  "--dial-timeout=5s", "--command-timeout=10s"};
    if (options_.tls) {
      argv.push_back("--cacert=" + caFile());
      argv.push_back("--cert=" + certFile());
      argv.push_back("--key=" + keyFile());
    }
    argv.insert(argv.end(), args.begin(), args.end());
    const auto log = dir_ / "etcdctl.log";
    if (runProgram(argv, log.string()) != 0) {
      throw std::runtime_error("etcdctl " + args.front() + " " + args.at(1) +
                               " failed: " + readFileText(log));
    }
  }

  void enableAuth() {
    etcdctl({"user", "add", "root", "--new-user-password=root-pw"});
    etcdctl({"user", "grant-role", "root", "root"});
    etcdctl({"user", "add", kEtcdUser, std::string("--new-user-password=") + kEtcdPassword});
    etcdctl({"user", "grant-role", kEtcdUser, "root"});
    etcdctl({"auth", "enable"});
  }

  void openssl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"/usr/bin/openssl"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto log = dir_ / "openssl.log";
    if (runProgram(argv, log.string()) != 0) {
      throw std::runtime_error("openssl " + args.front() + " failed: " + readFileText(log));
    }
  }

  // EC P-256 keys (fast to make); certificates valid for a day.
  void makeCertificates() {
    const auto p = [this](const char* file) { return (dir_ / file).string(); };
    const std::vector<std::string> ec{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                      "-nodes"};
    const auto ca = [&](const char* key, const char* pem, const char* cn) {
      std::vector<std::string> args{"req", "-x509"};
      args.insert(args.end(), ec.begin(), ec.end());
      args.insert(args.end(), {"-keyout", p(key), "-out", p(pem), "-days", "1", "-subj",
                               std::string("/CN=") + cn});
      openssl(args);
    };
    ca("ca.key", "ca.pem", "dtrun test CA");
    ca("wrong-ca.key", "wrong-ca.pem", "dtrun wrong CA");
    const auto leaf = [&](const char* stem, const char* cn, const char* extensions) {
      const std::string s(stem);
      std::vector<std::string> args{"req"};
      args.insert(args.end(), ec.begin(), ec.end());
      args.insert(args.end(), {"-keyout", p((s + ".key").c_str()), "-out", p((s + ".csr").c_str()),
                               "-subj", std::string("/CN=") + cn});
      openssl(args);
      std::ofstream(p((s + ".ext").c_str())) << extensions;
      openssl({"x509", "-req", "-in", p((s + ".csr").c_str()), "-CA", p("ca.pem"), "-CAkey",
               p("ca.key"), "-CAcreateserial", "-out", p((s + ".pem").c_str()), "-days", "1",
               "-extfile", p((s + ".ext").c_str())});
    };
    leaf("server", "127.0.0.1",
         "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
    leaf("client", kEtcdUser, "extendedKeyUsage=clientAuth\n");
  }

  void stopAll() {
    for (auto& m : members_) {
      if (m.pid > 0) {
        ::kill(m.pid, SIGKILL);
      }
    }
    for (auto& m : members_) {
      if (m.pid > 0) {
        int status = 0;
        ::waitpid(m.pid, &status, 0);
        m.pid = -1;
      }
    }
  }

  EtcdClusterOptions options_;
  TempDir fallback_;
  std::filesystem::path dir_;
  std::vector<Member> members_;
};

}  // namespace dtrun::testing
