// Starting and owning one worker process. Not thread-safe; spawn only from the agent's
// long-lived loop thread, because PR_SET_PDEATHSIG fires when the *forking thread* exits.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit code, or the signal number when signaled
  // Who sent a signal when dtrun could tell: "killed by the kernel: out of memory (...)".
  std::string killedBy;
  // The shell convention dtrun exits with: code, or 128 + signal.
  [[nodiscard]] int shellCode() const { return signaled ? 128 + code : code; }
  [[nodiscard]] bool success() const { return !signaled && code == 0; }
  // "exit code 3", "signal 11 (SIGSEGV)", "signal 9 (SIGKILL), killed by the kernel: ..."
  [[nodiscard]] std::string describe() const;
};

std::string signalName(int signal);  // "SIGSEGV", or "signal 77"

struct SpawnRequest {
  std::string path;               // resolved executable (absolute or relative to cwd)
  std::vector<std::string> argv;  // argv[0] as the program sees it
  std::vector<std::string> env;   // "NAME=value"
  int stdoutFd = -1;              // -1 = inherit
  int stderrFd = -1;
  // Set between fork and exec: the CPU affinity (empty = inherited; a failure fails the start)
  // and the preferred memory nodes (empty = the default policy; best effort, as a preference is).
  std::vector<int> cpus;
  std::vector<int> memNodes;
};

// A running child in its own process group that dies with the agent (PR_SET_PDEATHSIG). The
// destructor SIGKILLs the group and reaps a child that is still running, so no path leaves a
// zombie or an orphan.
class ChildProcess {
 public:
  // Forks the child and returns at once; confirmExec() then says whether exec succeeded. Starting
  // a group is start() for every worker, then confirmExec() for each, so the workers' execs run
  // in parallel instead of one after another.
  [[nodiscard]] static Result<ChildProcess> start(const SpawnRequest& request);
  // Blocks until the child exec'd or failed to. Fails with the child's errno ("cannot run
  // ./trian: No such file or directory"), after reaping it.
  [[nodiscard]] Status confirmExec();
  // start() + confirmExec().
  [[nodiscard]] static Result<ChildProcess> spawn(const SpawnRequest& request);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Readable once the child exited (a pidfd).
  [[nodiscard]] int exitFd() const { return pidfd_.get(); }
  [[nodiscard]] bool running() const { return pid_ > 0 && !reaped_; }

  // Sends `signal` to the child's whole process group (reaching its own children too).
  void signalGroup(int signal) const;
  // The child outlived SIGKILL (stuck in the kernel): stop owning it without waiting. It stays
  // this process's child, reaped as an orphan if it ever ends; it is never signalled again.
  void abandon() { markReaped(); }
  // Reaps the child if it exited (never blocks); the status once it has.
  [[nodiscard]] std::optional<ExitStatus> tryReap();

 private:
  ChildProcess(pid_t pid, UniqueFd pidfd, UniqueFd execError, std::string path, std::string cpus)
      : pid_(pid),
        pidfd_(std::move(pidfd)),
        execError_(std::move(execError)),
        path_(std::move(path)),
        cpus_(std::move(cpus)) {}
  void killAndReap();
  void markReaped();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd execError_;  // read end of the exec-error pipe until confirmExec()
  std::string path_;
  std::string cpus_;  // the CPU list it is bound to ("" = not bound), for the error
  bool reaped_ = false;
};

// A pidfd for `pid` (readable once it exited), or -1 with errno.
int pidfdOpen(pid_t pid);

// Whether `pid` is a child that a live ChildProcess owns and has not reaped yet. Thread-safe.
bool isOwnedChild(pid_t pid);

// Live children of this process that no ChildProcess owns: descendants of workers that left their
// process group (setsid, a daemon) and were re-parented to this subreaper when their parent
// exited. Each with its name (as /proc shows it); neither zombies (reapOrphans takes them) nor
// dtrun's own helpers (helper_children.h) are listed.
std::vector<std::pair<pid_t, std::string>> unownedLiveChildren();

// Where a live process waits, from /proc: "state D (uninterruptible sleep) in the kernel's
// request_wait_answer"; the wait channel is left out where the kernel does not say it.
std::string kernelWaitOf(pid_t pid);

}  // namespace dtrun::agent::detail
