/* launch_floor: what any launcher must do for N workers, and nothing else: the floor dtrun's
 * launch is measured against (bench/launch/run_floor.sh).
 *
 *   launch_floor N LOG_DIR PROGRAM [ARGS...]
 *
 * For each rank r: makes LOG_DIR/attempt_0/r/, opens stdout.log and stderr.log there, forks, and
 * in the child points stdout and stderr at them, sets RANK, LOCAL_RANK, WORLD_SIZE and
 * LOCAL_WORLD_SIZE, and execs PROGRAM (searched in PATH). Then waits for every worker. Exits 0
 * when all exited 0, 1 when one did not, 2 on bad usage or a failed system call (named).
 * No threads, no pipes, no store, no health checks, no report: a launcher cannot do less and
 * still give each rank its environment and its own log files.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int fail(const char* what, const char* path) {
  fprintf(stderr, "launch_floor: %s %s: %s\n", what, path, strerror(errno));
  return 2;
}

/* path = a/b, or -1 when it does not fit. */
static int join(char* path, size_t size, const char* a, const char* b) {
  const int n = snprintf(path, size, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= size) {
    fprintf(stderr, "launch_floor: the path %s/%s is too long\n", a, b);
    return -1;
  }
  return 0;
}

static int make_dir(const char* path) {
  return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : fail("mkdir", path);
}

static int open_log(const char* dir, const char* name) {
  char path[4096];
  if (join(path, sizeof path, dir, name) != 0) {
    return -1;
  }
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail("open", path);
  }
  return fd;
}

int main(int argc, char** argv) {
  if (argc < 4 || atoi(argv[1]) < 1) {
    fprintf(stderr, "usage: launch_floor N LOG_DIR PROGRAM [ARGS...]\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  char attempt[4096];
  if (join(attempt, sizeof attempt, argv[2], "attempt_0") != 0 || make_dir(argv[2]) != 0 ||
      make_dir(attempt) != 0) {
    return 2;
  }
  char world[16];
  snprintf(world, sizeof world, "%d", n);
  for (int rank = 0; rank < n; ++rank) {
    char dir[4096];
    char r[16];
    snprintf(r, sizeof r, "%d", rank);
    if (join(dir, sizeof dir, attempt, r) != 0 || make_dir(dir) != 0) {
      return 2;
    }
    const int out = open_log(dir, "stdout.log");
    const int err = open_log(dir, "stderr.log");
    if (out < 0 || err < 0) {
      return 2;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      return fail("fork for rank", dir);
    }
    if (pid == 0) {
      if (dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
        _exit(127);
      }
      setenv("RANK", r, 1);
      setenv("LOCAL_RANK", r, 1);
      setenv("WORLD_SIZE", world, 1);
      setenv("LOCAL_WORLD_SIZE", world, 1);
      execvp(argv[3], argv + 3);
      _exit(127);
    }
    close(out);
    close(err);
  }
  int failed = 0;
  for (int left = n; left > 0; --left) {
    int status = 0;
    if (wait(&status) < 0) {
      return fail("wait", "for the workers");
    }
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return failed ? 1 : 0;
}
