#include "fanout/ssh_fanout.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrun/common.h"

#include "fanout/line_cutter.h"
#include "fd_io.h"
#include "signal_mask.h"

namespace dtrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kQuiet{200};         // an unfinished line goes out alone after this
constexpr milliseconds kPeerGrace{5000};    // after a host failed: the others' time to end alone
constexpr milliseconds kStopMargin{10000};  // beyond the agents' shutdown timeout: sessions closed
constexpr milliseconds kKillMargin{10000};  // beyond the remote helper's grace: ssh SIGKILLed
constexpr milliseconds kDrain{2000};        // a host's output read after its ssh exited
constexpr std::size_t kEarlyLines = 50;     // stderr lines held until the remote agent is up
constexpr std::size_t kReasonLines = 3;     // of them, in a failed host's one line
constexpr int kSshFailed = 255;             // ssh's own exit code: the connection failed

constexpr std::array kForwarded = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

bool stops(int signal) { return signal != SIGUSR1 && signal != SIGUSR2; }

int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfdSignal(int pidfd, int signal) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

std::string signalName(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::string withoutEnd(std::string line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.pop_back();
  }
  return line;
}

struct Stream {
  UniqueFd fd;
  LineCutter cutter;
  std::optional<Clock::time_point> heldSince;
  int console = STDOUT_FILENO;
};

struct Node {
  const SshNode* spec = nullptr;
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd control;  // ssh's stdin
  Stream out;
  Stream err;
  bool ready = false;              // the remote agent said it is up
  std::vector<std::string> early;  // stderr before that: ssh's, the remote shell's
  std::optional<int> code;         // ssh's exit status, once reaped
  std::optional<Clock::time_point> exitedAt;
  bool finished = false;  // exit and output handled
};

class Fanout {
 public:
  explicit Fanout(const SshPlan& plan) : plan_(plan), nodes_(plan.nodes.size()) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      nodes_[i].spec = &plan.nodes[i];
      nodes_[i].err.console = STDERR_FILENO;
    }
  }

  int run() {
    const sigset_t set = signals::block(std::vector<int>(kForwarded.begin(), kForwarded.end()));
    static_cast<void>(::signal(SIGPIPE, SIG_IGN));  // a control pipe whose ssh is gone
    signalFd_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signalFd_.valid()) {
      std::cerr << "dtrun: signalfd: " << std::system_category().message(errno) << "\n";
      return 1;
    }
    std::string names;
    for (const SshNode& node : plan_.nodes) {
      names += (names.empty() ? "" : ", ") + node.host;
    }
    say("starting " + std::to_string(nodes_.size()) + " hosts over ssh (" + names + "), rdzv_id " +
        plan_.rdzvId + ", store " + plan_.rdzvEndpoint);
    for (Node& node : nodes_) {
      if (const Status started = spawn(node); !started.isOk()) {
        say("host " + node.spec->host + ": cannot start ssh: " + started.message());
        node.code = kSshFailed;
        node.exitedAt = Clock::now();
        node.finished = true;
        noteFailure(node);
      }
    }
    loop();
    // Stopped by a signal here: hosts that ended on their own meanwhile (the job was over for
    // them once another host left) do not make it a failure; the code says it was interrupted.
    if (!jobCode_ && userStop_ != 0 &&
        std::any_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.code != 0; })) {
      jobCode_ = 128 + userStop_;
    }
    summarize();
    return jobCode_.value_or(0);
  }

 private:
  static void say(const std::string& line) {
    static_cast<void>(io::writeAll(STDERR_FILENO, "dtrun: " + line + "\n"));
  }

  Status spawn(Node& node) {
    std::array<int, 2> in{-1, -1};
    std::array<int, 2> out{-1, -1};
    std::array<int, 2> err{-1, -1};
    if (::pipe2(in.data(), O_CLOEXEC) != 0 || ::pipe2(out.data(), O_CLOEXEC) != 0 ||
        ::pipe2(err.data(), O_CLOEXEC) != 0) {
      const int saved = errno;
      for (const int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
        if (fd >= 0) {
          ::close(fd);
        }
      }
      return Status::system("pipe2", saved);
    }
    std::vector<char*> argv;
    std::vector<std::string> words = node.spec->argv;
    argv.reserve(words.size() + 1);
    for (std::string& word : words) {
      argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int saved = errno;
      for (const int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
        ::close(fd);
      }
      return Status::system("fork", saved);
    }
    if (pid == 0) {
      // Its own process group: the terminal's Ctrl-C reaches this dtrun, which forwards it.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) {
        ::_exit(kSshFailed);
      }
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
      static_cast<void>(::signal(SIGPIPE, SIG_DFL));
      ::execv(argv[0], argv.data());
      ::_exit(kSshFailed);
    }
    ::setpgid(pid, pid);
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    node.pid = pid;
    node.control = UniqueFd(in[1]);
    node.out.fd = UniqueFd(out[0]);
    node.err.fd = UniqueFd(err[0]);
    for (const int fd : {out[0], err[0]}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    node.pidfd = UniqueFd(pidfdOpen(pid));
    if (!node.pidfd.valid()) {
      return Status::system("pidfd_open", errno);
    }
    return Status::ok();
  }

  [[nodiscard]] bool done() const {
    return std::all_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.finished; });
  }

  void loop() {
    while (!done()) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Node*, Stream*>> streams;  // parallel to fds from index 1
      std::vector<Node*> exits;
      fds.push_back({signalFd_.get(), POLLIN, 0});
      for (Node& node : nodes_) {
        for (Stream* stream : {&node.out, &node.err}) {
          if (stream->fd.valid()) {
            fds.push_back({stream->fd.get(), POLLIN, 0});
            streams.emplace_back(&node, stream);
            exits.push_back(nullptr);
          }
        }
        if (node.pidfd.valid() && !node.code) {
          fds.push_back({node.pidfd.get(), POLLIN, 0});
          streams.emplace_back(&node, nullptr);
          exits.push_back(&node);
        }
      }
      const int ready = ::poll(fds.data(), fds.size(), timeoutMs());
      if (ready < 0 && errno != EINTR) {
        say("poll: " + std::system_category().message(errno));
        killAll();
        return;
      }
      if (ready > 0) {
        if ((fds[0].revents & POLLIN) != 0) {
          onSignal();
        }
        for (std::size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents == 0) {
            continue;
          }
          auto [node, stream] = streams[i - 1];
          if (stream != nullptr) {
            onOutput(*node, *stream);
          } else {
            onExit(*node);
          }
        }
      }
      onTimers(Clock::now());
    }
  }

  int timeoutMs() const {
    std::optional<Clock::time_point> next;
    const auto consider = [&next](std::optional<Clock::time_point> at) {
      if (at && (!next || *at < *next)) {
        next = at;
      }
    };
    for (const Node& node : nodes_) {
      for (const Stream* stream : {&node.out, &node.err}) {
        if (stream->heldSince) {
          consider(*stream->heldSince + kQuiet);
        }
      }
      if (node.exitedAt && !node.finished) {
        consider(*node.exitedAt + kDrain);
      }
    }
    consider(peerDeadline_);
    consider(closeDeadline_);
    consider(killDeadline_);
    if (!next) {
      return -1;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(*next - Clock::now()).count() + 1;
    return static_cast<int>(std::clamp<long long>(left, 0, 60000));
  }

  void onSignal() {
    signalfd_siginfo info{};
    while (::read(signalFd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int signal = static_cast<int>(info.ssi_signo);
      if (stops(signal)) {
        if (userStop_ == 0) {
          say(signalName(signal) + ": stopping the job on every host" +
              (signal == SIGINT ? " (Ctrl-C again to kill the workers at once)" : ""));
          userStop_ = signal;
        }
      }
      forward(signal);
    }
  }

  // The signal to every host whose session is open. A stop signal arms the bounds: the sessions
  // close after the agents' shutdown timeout plus a margin, ssh is killed after another.
  void forward(int signal) {
    const auto byte = static_cast<unsigned char>(signal);
    for (Node& node : nodes_) {
      if (node.control.valid() && !node.code) {
        static_cast<void>(io::writeAll(node.control.get(), &byte, 1));
      }
    }
    if (stops(signal) && !closeDeadline_ && !killDeadline_) {
      closeDeadline_ = Clock::now() + plan_.shutdownTimeout + kStopMargin;
    }
  }

  void onOutput(Node& node, Stream& stream) {
    std::array<char, 65536> buffer{};
    const ssize_t n = ::read(stream.fd.get(), buffer.data(), buffer.size());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    }
    if (n <= 0) {
      emit(node, stream, stream.cutter.flush());
      stream.heldSince.reset();
      stream.fd.reset();
      finishIfDrained(node, Clock::now());
      return;
    }
    emit(node, stream,
         stream.cutter.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n))));
    if (!stream.cutter.holding()) {
      stream.heldSince.reset();
    } else if (!stream.heldSince) {
      stream.heldSince = Clock::now();
    }
  }

  void emit(Node& node, const Stream& stream, const std::vector<std::string>& lines) {
    for (const std::string& line : lines) {
      if (&stream == &node.err && !node.ready) {
        if (withoutEnd(line) == kRemoteReadyLine) {
          node.ready = true;
          for (const std::string& held : node.early) {
            write(node, stream, held);
          }
          node.early.clear();
          continue;
        }
        node.early.push_back(line);
        if (node.early.size() > kEarlyLines) {  // a chatty login: not ssh's reason, show it
          node.ready = true;
          for (const std::string& held : node.early) {
            write(node, stream, held);
          }
          node.early.clear();
        }
        continue;
      }
      write(node, stream, line);
    }
  }

  static void write(const Node& node, const Stream& stream, const std::string& line) {
    static_cast<void>(io::writeAll(stream.console, node.spec->host + ": " + line));
  }

  void onExit(Node& node) {
    int status = 0;
    pid_t reaped = 0;
    do {
      reaped = ::waitpid(node.pid, &status, WNOHANG);
    } while (reaped < 0 && errno == EINTR);
    if (reaped == 0) {
      return;  // not yet
    }
    node.code = reaped < 0            ? kSshFailed
                : WIFEXITED(status)   ? WEXITSTATUS(status)
                : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                      : kSshFailed;
    node.exitedAt = Clock::now();
    node.pidfd.reset();
    node.control.reset();
    finishIfDrained(node, *node.exitedAt);
  }

  // A host is done once its ssh exited and its output ended (or kDrain after the exit: a
  // process on the remote side may hold the session's output open).
  void finishIfDrained(Node& node, Clock::time_point now) {
    if (node.finished || !node.exitedAt) {
      return;
    }
    const bool drained = !node.out.fd.valid() && !node.err.fd.valid();
    if (!drained && now < *node.exitedAt + kDrain) {
      return;
    }
    for (Stream* stream : {&node.out, &node.err}) {
      emit(node, *stream, stream->cutter.flush());
      stream->heldSince.reset();
      stream->fd.reset();
    }
    node.finished = true;
    const int code = node.code.value_or(kSshFailed);
    if (!node.ready) {
      std::string reason;
      const std::size_t from =
          node.early.size() > kReasonLines ? node.early.size() - kReasonLines : 0;
      for (std::size_t i = from; i < node.early.size(); ++i) {
        const std::string line = withoutEnd(node.early[i]);
        if (!line.empty()) {
          reason += (reason.empty() ? "" : " / ") + line;
        }
      }
      if (code != 0) {
        say("host " + node.spec->host + " (node " + std::to_string(node.spec->nodeRank) + "): " +
            (code == kSshFailed
                 ? "ssh failed"
                 : "dtrun did not start there (exit code " + std::to_string(code) + ")") +
            (reason.empty() ? std::string() : ": " + reason));
      } else if (!reason.empty()) {
        for (const std::string& held : node.early) {
          write(node, node.err, held);
        }
      }
      node.early.clear();
    }
    if (code != 0) {
      noteFailure(node);
    }
  }

  // The first host to fail sets the job's code; the others get kPeerGrace to end on their own
  // (a failed job ends everywhere at once), or none when that host never started its agent.
  void noteFailure(const Node& node) {
    if (userStop_ != 0) {
      return;  // a consequence of the stop (run() gives the job 128 + the signal)
    }
    if (!jobCode_) {
      jobCode_ = node.code;
      firstFailure_ = "host " + node.spec->host + " (node " + std::to_string(node.spec->nodeRank) +
                      ") ended with exit code " + std::to_string(node.code.value_or(kSshFailed));
    }
    if (peerDeadline_ || closeDeadline_ || killDeadline_) {
      return;
    }
    peerDeadline_ = Clock::now() + (node.ready ? kPeerGrace : milliseconds(0));
  }

  void onTimers(Clock::time_point now) {
    for (Node& node : nodes_) {
      for (Stream* stream : {&node.out, &node.err}) {
        if (stream->heldSince && now >= *stream->heldSince + kQuiet) {
          emit(node, *stream, stream->cutter.flush());
          stream->heldSince.reset();
        }
      }
      finishIfDrained(node, now);
    }
    if (peerDeadline_ && now >= *peerDeadline_) {
      peerDeadline_.reset();
      if (!done()) {
        say(firstFailure_ + ": stopping the other hosts");
        forward(SIGTERM);
      }
    }
    if (closeDeadline_ && now >= *closeDeadline_) {
      closeDeadline_.reset();
      say("hosts still running after the shutdown timeout: closing their sessions");
      for (Node& node : nodes_) {
        node.control.reset();  // end of file: the remote helper stops the agent, then kills it
      }
      killDeadline_ = now + plan_.shutdownTimeout + kKillMargin;
    }
    if (killDeadline_ && now >= *killDeadline_) {
      killDeadline_.reset();
      say("killing the ssh clients still running");
      killAll();
    }
  }

  void killAll() {
    for (Node& node : nodes_) {
      if (node.pidfd.valid() && !node.code) {
        static_cast<void>(pidfdSignal(node.pidfd.get(), SIGKILL));
      }
    }
  }

  void summarize() const {
    if (!jobCode_ || *jobCode_ == 0) {
      return;
    }
    std::string codes;
    for (const Node& node : nodes_) {
      codes += (codes.empty() ? "" : ", ") + node.spec->host + " " +
               std::to_string(node.code.value_or(kSshFailed));
    }
    say("job " + plan_.rdzvId + " ended with exit code " + std::to_string(*jobCode_) +
        " (exit code per host: " + codes + ")");
  }

  const SshPlan& plan_;
  std::vector<Node> nodes_;
  UniqueFd signalFd_;
  int userStop_ = 0;  // the first stop signal that reached this dtrun; 0 for none
  std::optional<int> jobCode_;
  std::string firstFailure_;  // "host h (node n) ended with exit code c"
  std::optional<Clock::time_point> peerDeadline_;
  std::optional<Clock::time_point> closeDeadline_;
  std::optional<Clock::time_point> killDeadline_;
};

}  // namespace

SshFacts readSshFacts(
    const std::map<std::string, std::string, std::less<>>& env,
    const std::function<std::optional<std::string>(const std::string& program)>& resolveProgram) {
  SshFacts facts;
  std::error_code error;
  const std::filesystem::path physical = std::filesystem::current_path(error);
  facts.cwd = error ? std::string() : physical.string();
  // The shell's logical directory when it is the same one: /home/u may be a link that each
  // host resolves to its own mount.
  if (const auto pwd = env.find("PWD"); pwd != env.end() && !facts.cwd.empty()) {
    struct stat logical {};
    struct stat real {};
    if (::stat(pwd->second.c_str(), &logical) == 0 && ::stat(facts.cwd.c_str(), &real) == 0 &&
        logical.st_dev == real.st_dev && logical.st_ino == real.st_ino) {
      facts.cwd = pwd->second;
    }
  }
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  facts.selfExe = error ? std::string() : self.string();
  facts.sshProgram = resolveProgram("ssh").value_or("");
  return facts;
}

int runSsh(const SshPlan& plan) {
  Fanout fanout(plan);
  return fanout.run();
}

}  // namespace dtrun::launcher
