#include "shm_setup.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>

#include "dtrun/runtime.h"

#include "log.h"
#include "store_handle.h"

namespace dtrun::runtime::detail::shm {
namespace {

using Clock = std::chrono::steady_clock;

// Default ring per direction: 4 MiB up to kBigRingRanks ranks on a host (fewer wake-ups of a
// writer waiting for room), 1 MiB beyond, so that 8 ranks' 56 rings still fit a small /dev/shm.
constexpr std::size_t kBigRingBytes = std::size_t{4} << 20U;
constexpr std::size_t kDefaultRingBytes = std::size_t{1} << 20U;
constexpr int kBigRingRanks = 4;
// Point-to-point messages of at least DTRUN_SHM_ONE_COPY_BYTES move once (the receiver and the
// sender copy straight between their buffers) instead of twice (through the ring). Off unless
// set: on this project's 2-core VM a process_vm_readv moves 2.5-4.7 GB/s where memcpy moves 5-10,
// so the one copy costs as much CPU as the ring's two and was not faster under load
// (bench/README, "One copy").
constexpr std::size_t kOneCopyBytes = 0;
constexpr std::uint32_t kMaxPathBytes = 4096;

// NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
const char* env(const char* name) { return std::getenv(name); }

std::string firstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string linkText(const char* path) {
  std::string buffer(PATH_MAX, '\0');
  const ssize_t n = ::readlink(path, buffer.data(), buffer.size());
  return n > 0 ? buffer.substr(0, static_cast<std::size_t>(n)) : std::string();
}

// Two processes may share memory through a tmpfs file when they run on one kernel (boot id) and
// see the same files (mount namespace); the hostname keeps containers apart whose namespaces
// cannot be read.
std::string hostIdentity(int globalRank) {
  if (const char* forced = env("DTRUN_HOST_ID"); forced != nullptr && *forced != '\0') {
    // A comma-separated list gives rank r the r-th entry: tests make "hosts" out of one.
    const std::string text(forced);
    std::vector<std::string> items;
    std::size_t start = 0;
    for (std::size_t comma = text.find(','); comma != std::string::npos;
         comma = text.find(',', start)) {
      items.push_back(text.substr(start, comma - start));
      start = comma + 1;
    }
    items.push_back(text.substr(start));
    if (items.size() == 1) {
      return "forced:" + items[0];
    }
    if (static_cast<std::size_t>(globalRank) >= items.size()) {
      throw ConfigError("DTRUN_HOST_ID='" + text + "' has " + std::to_string(items.size()) +
                        " entries, none for rank " + std::to_string(globalRank) +
                        ": give one entry per rank, or a single value");
    }
    return "forced:" + items[static_cast<std::size_t>(globalRank)];
  }
  std::string host(HOST_NAME_MAX + 1, '\0');
  if (::gethostname(host.data(), host.size()) != 0) {
    host = "?";
  }
  host.resize(std::char_traits<char>::length(host.c_str()));
  return firstLine("/proc/sys/kernel/random/boot_id") + "/" + host + "/" +
         linkText("/proc/self/ns/mnt");
}

bool forcedTcp() {
  const char* mode = env("DTRUN_TRANSPORT");
  if (mode == nullptr || *mode == '\0') {
    return false;
  }
  const std::string m(mode);
  if (m == "tcp") {
    return true;
  }
  if (m == "auto" || m == "shm") {
    return false;
  }
  throw ConfigError("DTRUN_TRANSPORT='" + m +
                    "': expected 'tcp' (sockets only) or 'auto' (shared memory between ranks on "
                    "one host, the default)");
}

std::size_t ringBytes(int localRanks) {
  return bytesFromEnv("DTRUN_SHM_RING_BYTES",
                      localRanks <= kBigRingRanks ? kBigRingBytes : kDefaultRingBytes);
}

// Messages of at least this go as remote reads (shm_link.h) where the pair allows it:
// DTRUN_SHM_ONE_COPY_BYTES, 0 (the default) for never.
std::size_t oneCopyBytes() {
  const char* text = env("DTRUN_SHM_ONE_COPY_BYTES");
  if (text != nullptr && std::string(text) == "0") {
    return 0;
  }
  return bytesFromEnv("DTRUN_SHM_ONE_COPY_BYTES", kOneCopyBytes);
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The set-up's blocking exchanges on the (non-blocking) sockets, against one deadline.
class Channel {
 public:
  Channel(const CommunicatorConfig& config, Clock::time_point deadline)
      : config_(config), deadline_(deadline) {}

  void send(int fd, int peer, const void* data, std::size_t bytes) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
      if (n > 0) {
        p += n;
        bytes -= static_cast<std::size_t>(n);
        continue;
      }
      const int err = errno;
      if (err == EINTR) {
        continue;
      }
      if (err != EAGAIN && err != EWOULDBLOCK) {
        throw CommError(what() + ": connection to " + name(peer) + " failed: " + errnoText(err));
      }
      waitFor(fd, POLLOUT, peer);
    }
  }

  void recv(int fd, int peer, void* data, std::size_t bytes) {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::recv(fd, p, bytes, 0);
      if (n > 0) {
        p += n;
        bytes -= static_cast<std::size_t>(n);
        continue;
      }
      if (n == 0) {
        throw CommError(what() + ": connection to " + name(peer) + " closed");
      }
      const int err = errno;
      if (err == EINTR) {
        continue;
      }
      if (err != EAGAIN && err != EWOULDBLOCK) {
        throw CommError(what() + ": connection to " + name(peer) + " failed: " + errnoText(err));
      }
      waitFor(fd, POLLIN, peer);
    }
  }

  [[nodiscard]] std::string what() const {
    return "tcp process group '" + config_.groupName + "' shared-memory set-up";
  }
  [[nodiscard]] std::string name(int peer) const {
    return "rank " + std::to_string(config_.globalRanks[static_cast<std::size_t>(peer)]);
  }

 private:
  static std::string errnoText(int err) { return std::system_category().message(err); }

  void waitFor(int fd, short events, int peer) {
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) {
        throw TimeoutError(what() + ": timed out after " + std::to_string(config_.timeout.count()) +
                           " ms waiting for " + name(peer));
      }
      pollfd pfd{fd, events, 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left, INT_MAX)));
      if (rc > 0 || (rc < 0 && errno != EINTR)) {
        return;  // ready, or an error the next send/recv reports
      }
    }
  }

  const CommunicatorConfig& config_;
  const Clock::time_point deadline_;
};

void warnOnce(const std::string& line) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    log::runtime().warn("{}", line);
  }
}

}  // namespace

std::string shmDir() {
  const char* dir = env("DTRUN_SHM_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string("/dev/shm");
}

int Topology::hostCount() const {
  return host.empty() ? 0 : *std::max_element(host.begin(), host.end()) + 1;
}

Topology connectLinks(const CommunicatorConfig& config, const std::vector<UniqueFd>& fds) {
  const int n = config.size;
  const int me = config.rank;
  Topology topo;
  topo.links.resize(static_cast<std::size_t>(n));
  topo.host.assign(static_cast<std::size_t>(n), 0);
  if (n <= 1) {
    return topo;
  }
  const auto deadline = Clock::now() + config.timeout;
  const bool tcpOnly = forcedTcp();
  (void)ringBytes(1);  // a bad value is refused before anything is set up

  // Host identities through the store.
  auto key = [&](int r) { return config.groupName + "/host/" + std::to_string(r); };
  config.store->set(key(me), hostIdentity(config.globalRanks[static_cast<std::size_t>(me)]));
  std::vector<std::string> ids(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    ids[static_cast<std::size_t>(r)] = config.store->get(
        key(r), "rank " + std::to_string(config.globalRanks[static_cast<std::size_t>(r)]) +
                    "'s host identity");
  }
  std::vector<std::string> distinct;
  for (int r = 0; r < n; ++r) {
    const std::string& id = ids[static_cast<std::size_t>(r)];
    auto it = std::find(distinct.begin(), distinct.end(), id);
    if (it == distinct.end()) {
      distinct.push_back(id);
      it = distinct.end() - 1;
    }
    topo.host[static_cast<std::size_t>(r)] = static_cast<int>(it - distinct.begin());
  }
  auto local = [&](int q) {
    return q != me &&
           topo.host[static_cast<std::size_t>(q)] == topo.host[static_cast<std::size_t>(me)];
  };

  const auto localRanks = static_cast<int>(
      std::count(topo.host.begin(), topo.host.end(), topo.host[static_cast<std::size_t>(me)]));
  const std::size_t capacity = ringBytes(localRanks);
  const std::size_t oneCopy = oneCopyBytes();

  // Pairs on this host: offers to the higher ranks first (small writes, never blocking for
  // long), then answers to the lower ranks' offers, then the higher ranks' answers; no rank waits
  // for one that waits for it.
  Channel channel(config, deadline);
  static std::atomic<std::uint64_t> segments{0};
  const std::string dir = shmDir();
  const std::uint64_t group = fnv1a(config.store->prefix() + "/" + config.groupName);
  // Segments offered and not yet unlinked: whatever happens, none outlives this call.
  struct Offered {
    std::vector<std::string> paths;
    Offered(const Offered&) = delete;
    Offered& operator=(const Offered&) = delete;
    Offered(Offered&&) = delete;
    Offered& operator=(Offered&&) = delete;
    explicit Offered(std::size_t count) : paths(count) {}
    ~Offered() {
      for (const std::string& path : paths) {
        if (!path.empty()) {
          ::unlink(path.c_str());
        }
      }
    }
  } offered(static_cast<std::size_t>(n));
  for (int q = me + 1; q < n; ++q) {
    if (!local(q)) {
      continue;
    }
    std::string path;
    if (!tcpOnly) {
      path = dir + "/dtrun-" + std::to_string(::getpid()) + "-" + std::to_string(group % 1000000) +
             "-" + std::to_string(me) + "-" + std::to_string(q) + "-" + std::to_string(segments++);
      std::string error;
      topo.links[static_cast<std::size_t>(q)] = Link::create(path, capacity, error);
      if (!topo.links[static_cast<std::size_t>(q)]) {
        warnOnce("shm: " + channel.name(q) + " shares this host but stays on TCP: " + error +
                 " (DTRUN_SHM_DIR names another tmpfs; DTRUN_TRANSPORT=tcp silences this)");
        path.clear();
      }
    }
    const auto length = static_cast<std::uint32_t>(path.size());
    const int fd = fds[static_cast<std::size_t>(q)].get();
    channel.send(fd, q, &length, sizeof length);
    channel.send(fd, q, path.data(), path.size());
    offered.paths[static_cast<std::size_t>(q)] = path;
  }
  for (int q = 0; q < me; ++q) {
    if (!local(q)) {
      continue;
    }
    const int fd = fds[static_cast<std::size_t>(q)].get();
    std::uint32_t length = 0;
    channel.recv(fd, q, &length, sizeof length);
    if (length > kMaxPathBytes) {
      throw CommError(channel.what() + ": " + channel.name(q) + " offered a segment path of " +
                      std::to_string(length) + " bytes");
    }
    std::string path(length, '\0');
    channel.recv(fd, q, path.data(), length);
    char answer = 0;
    if (!path.empty() && !tcpOnly) {
      std::string error;
      auto& link = topo.links[static_cast<std::size_t>(q)];
      link = Link::open(path, error);
      if (link) {
        link->setOneCopyBytes(oneCopy);
        link->probePeer();  // the creator published its side before it offered the segment
        answer = 1;
      } else {
        warnOnce("shm: " + channel.name(q) + " shares this host but stays on TCP: " + error);
      }
    }
    channel.send(fd, q, &answer, 1);
  }
  for (int q = me + 1; q < n; ++q) {
    if (!local(q)) {
      continue;
    }
    char answer = 0;
    channel.recv(fds[static_cast<std::size_t>(q)].get(), q, &answer, 1);
    std::string& path = offered.paths[static_cast<std::size_t>(q)];
    if (!path.empty()) {
      ::unlink(path.c_str());  // both sides hold it mapped: the name is no longer needed
      path.clear();
    }
    auto& link = topo.links[static_cast<std::size_t>(q)];
    if (answer != 1) {
      link.reset();
    } else if (link) {
      link->setOneCopyBytes(oneCopy);
      link->probePeer();  // the peer published its side before it answered
    }
  }
  return topo;
}

}  // namespace dtrun::runtime::detail::shm
