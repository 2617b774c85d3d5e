// dtrt_check_worker: libdtrt's end-to-end checks, one process per rank under the real dtrun.
// tests/integration/runtime_test.sh drives it; by hand:
//   build/launcher/dtrun --nproc_per_node=3 --no_python
//   build/tests/worker_runtime/dtrt_check_worker ops tcp
// Modes (argv[1]):
//   ops <tcp|gloo|nccl>  checkGroup (ops_checks.h): every operation x dtype x ReduceOp at
//                        lengths 1, 7, 1001, 100003 against values computed here; barrier; p2p
//                        blocking and non-blocking with tags; sub-groups (the odd ranks, and
//                        {size-1, 0}); nccl uses cudaMalloc'd memory. runtime_test.sh runs it
//                        for nccl only: tests/runtime runs the same checks for tcp and gloo in
//                        one process, ranks as threads
//   early-exit <backend> <collective|create|kill>
//                        rank size-1 exits 3 (after the group formed, or before it), or SIGKILLs
//                        itself in the middle of 16 MiB all_reduce calls; the others must get
//                        CommError/TimeoutError naming it within DTRUN_TIMEOUT + 5 s
//   attempt <backend>    with --max_restarts=1: attempt 0 forms a group, then rank 0 exits 1;
//                        attempt 1 must form a fresh group under its own store prefix
//   errors <backend>     bad environment and bad arguments throw ConfigError naming the problem
//   noenv                outside dtrun: init() throws ConfigError naming RANK
//   die <throw|segv>     rank 0 logs at every level and waits; rank 1 dies of an uncaught
//                        exception or SIGSEGV: dtrun's report must quote its error file
// Output: one "PASS <check>", "FAIL <check>: <why>" or "SKIP <check>: <why>" line per check on
// stdout. Exit 0 when nothing failed, 1 otherwise (early-exit's dying rank: 3).
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef DTRUN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

#include "dtrun/runtime.h"

#include "check_values.h"
#include "ops_checks.h"

namespace dtrt_check {
namespace {

int runOps(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("ops", "unknown backend '" + backendName + "' (tcp, gloo or nccl)");
    return 1;
  }
  const bool cuda = *backend == rt::Backend::kNccl;
  const rt::Context ctx = rt::init();
  if (cuda) {
    if (!rt::backendAvailable(rt::Backend::kNccl)) {
      report.skip("nccl", "libdtrt was built without NCCL");
      return 0;
    }
#ifdef DTRUN_HAVE_NCCL
    if (!selectCudaDevice(report, ctx.localRank)) {
      return 0;
    }
#endif
  }
  return checkGroup(report, ctx, *backend);
}

// ---- early exit -----------------------------------------------------------------------------

// Marker files beside this rank's log directory (DTRUN_LOG_DIR's parent is the attempt's), for
// the few hand-overs that cannot go through a group: "<rank>.<what>".
class Markers {
 public:
  Markers() {
    const char* logDir = std::getenv("DTRUN_LOG_DIR");  // NOLINT(concurrency-mt-unsafe): one thread
    if (logDir != nullptr) {
      dir_ = std::filesystem::path(logDir).parent_path();
    }
  }
  void set(int rank, const std::string& what) const {
    if (!dir_.empty()) {
      std::ofstream(dir_ / (std::to_string(rank) + "." + what)) << "1\n";
    }
  }
  // Waits until ranks [0, count) all set `what`, at most limitS seconds (without DTRUN_LOG_DIR:
  // just waits 2 s).
  void waitAll(int count, const std::string& what, double limitS) const {
    const auto start = Clock::now();
    while (secondsSince(start) < limitS) {
      int seen = 0;
      for (int r = 0; r < count && !dir_.empty(); ++r) {
        seen += std::filesystem::exists(dir_ / (std::to_string(r) + "." + what)) ? 1 : 0;
      }
      if (dir_.empty() ? secondsSince(start) >= 2 : seen == count) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  std::filesystem::path dir_;
};

// Whether `message` names rank `r`: "rank 2", or in a list, "ranks 1, 2".
bool namesRank(const std::string& message, int r) {
  const std::regex pattern("ranks? ([0-9]+(, | and | or ))*" + std::to_string(r) + "([^0-9]|$)");
  return std::regex_search(message, pattern);
}

int runEarlyExit(Reporter& report, const std::string& backendName, const std::string& phase) {
  const auto backend = parseBackend(backendName);
  if (!backend || (phase != "collective" && phase != "create" && phase != "kill")) {
    report.fail("early-exit", "usage: early-exit <tcp|gloo> <collective|create|kill>");
    return 1;
  }
  // dtrun stops the other ranks with SIGTERM once the dying rank exited; the survivors stay to
  // see their error (dtrun's --shutdown_timeout must exceed DTRUN_TIMEOUT + margin). Ignored
  // from the start: the dying rank leaves only once every survivor said it is ready.
  (void)std::signal(SIGTERM, SIG_IGN);
  const rt::Context ctx = rt::init();
  const int dying = ctx.worldSize - 1;
  const std::string name = "early-exit " + backendName + " " + phase;
  if (ctx.worldSize < 2) {
    report.fail(name, "needs at least 2 ranks");
    return 1;
  }
  const Markers markers;
  if (phase == "create" && ctx.rank == dying) {
    markers.waitAll(dying, "ready", 20);
    std::printf("INFO rank %d exits 3 before creating the group\n", ctx.rank);
    (void)std::fflush(stdout);
    std::_Exit(3);
  }
  markers.set(ctx.rank, "ready");
  std::unique_ptr<rt::ProcessGroup> pg;
  auto start = Clock::now();
  try {
    pg = rt::ProcessGroup::create(ctx, *backend);
    pg->barrier();
    if (ctx.rank == dying && phase == "collective") {
      std::printf("INFO rank %d exits 3 after the group formed\n", ctx.rank);
      (void)std::fflush(stdout);
      std::_Exit(3);
    }
    if (ctx.rank == dying) {
      // Killed while its peers are in the middle of reading its data (or writing theirs).
      std::thread([rank = ctx.rank] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::printf("INFO rank %d kills itself during all_reduce\n", rank);
        (void)std::fflush(stdout);
        static_cast<void>(std::raise(SIGKILL));
      }).detach();
    }
    start = Clock::now();
    std::vector<float> data(phase == "kill" ? std::size_t{4} << 20U : 1000, 1.0F);
    for (int i = 0; i < 100; ++i) {  // the first one may complete only if the dead rank's part
      pg->allReduce(rt::view(std::span<float>(data)));  // was already on the way: keep going
    }
    report.fail(name, "100 all_reduce calls completed without rank " + std::to_string(dying));
    return 1;
  } catch (const rt::Error& e) {
    const double took = secondsSince(start);
    const bool rightType = dynamic_cast<const rt::CommError*>(&e) != nullptr ||
                           dynamic_cast<const rt::TimeoutError*>(&e) != nullptr;
    const double limit = std::chrono::duration<double>(ctx.timeout).count() + 5;
    std::printf("INFO rank %d caught after %.3f s: %s\n", ctx.rank, took, e.what());
    (void)std::fflush(stdout);
    report.expect(
        rightType, name + " error type",
        std::string("expected CommError or TimeoutError, got another Error: ") + e.what());
    report.expect(namesRank(e.what(), dying), name + " error names rank " + std::to_string(dying),
                  std::string("message: ") + e.what());
    report.expect(took <= limit, name + " error within DTRUN_TIMEOUT + 5 s",
                  "took " + std::to_string(took) + " s, limit " + std::to_string(limit) + " s");
    // No survivor leaves before every survivor saw its error: a survivor's exit must not be
    // what another one reports.
    markers.set(ctx.rank, "caught");
    markers.waitAll(dying, "caught", 10);
  }
  return report.exitCode();
}

// ---- restarts -------------------------------------------------------------------------------

int runAttempt(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("attempt", "unknown backend '" + backendName + "'");
    return 1;
  }
  const rt::Context ctx = rt::init();
  const char* countEnv =
      std::getenv("TORCHELASTIC_RESTART_COUNT");  // NOLINT(concurrency-mt-unsafe)
  const int attempt = countEnv != nullptr ? std::atoi(countEnv) : -1;
  const std::string label = "attempt " + std::to_string(attempt) + " " + backendName;
  report.expect(ctx.restartCount == attempt, label + " Context.restartCount",
                "restartCount " + std::to_string(ctx.restartCount) +
                    " but TORCHELASTIC_RESTART_COUNT " + std::to_string(attempt));
  report.expect(ctx.storePrefix == "/worker/attempt_" + std::to_string(attempt),
                label + " Context.storePrefix", "got '" + ctx.storePrefix + "'");
  std::unique_ptr<rt::ProcessGroup> pg;
  guarded(report, label + " create", [&] {
    const auto start = Clock::now();
    pg = rt::ProcessGroup::create(ctx, *backend);
    const double took = secondsSince(start);
    // A group that tried attempt 0's (dead) addresses would stall here until its timeout.
    report.expect(took < 5, label + " create is quick (no stale addresses)",
                  "took " + std::to_string(took) + " s");
  });
  if (!pg) {
    return 1;
  }
  guarded(report, label + " barrier + all_reduce", [&] {
    pg->barrier();
    std::vector<std::int64_t> v(3, static_cast<std::int64_t>(ctx.rank + 1) * (attempt + 1));
    pg->allReduce(rt::view(std::span<std::int64_t>(v)));
    const std::int64_t n = ctx.worldSize;
    const std::int64_t want = n * (n + 1) / 2 * (attempt + 1);
    report.expect(v[0] == want && v[2] == want, label + " all_reduce",
                  "got " + std::to_string(v[0]) + " expected " + std::to_string(want));
    pg->barrier();
  });
  if (attempt == 0) {
    // Rank 0 leaves the barrier before the others may have (their last message can still be on
    // the way): a rank 0 that left at once would be what they report, not the restart.
    const Markers markers;
    markers.set(ctx.rank, "checked");
    if (ctx.rank == 0) {
      markers.waitAll(ctx.worldSize, "checked", 20);
      std::printf("INFO rank 0 exits 1 to make dtrun restart the job\n");
      (void)std::fflush(stdout);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::seconds(60));  // dtrun stops us
    report.fail(label, "rank 0 exited but dtrun did not stop this rank within 60 s");
    return 1;
  }
  if (ctx.worldSize >= 2) {
    checkSubGroup(report, *pg, {0, ctx.worldSize - 1}, label, false);
  }
  guarded(report, label + " final barrier", [&] { pg->barrier(); });
  report.pass(label + " all checks ran");
  return report.exitCode();
}

// ---- errors ---------------------------------------------------------------------------------

// Expects body to throw E whose message contains every one of `parts`.
template <typename E>
void expectThrow(Reporter& report, const std::string& name, const std::vector<std::string>& parts,
                 const std::function<void()>& body) {
  try {
    body();
    report.fail(name, "no exception");
  } catch (const E& e) {
    std::string missing;
    for (const auto& p : parts) {
      if (!contains(e.what(), p)) {
        missing += (missing.empty() ? "'" : ", '") + p + "'";
      }
    }
    report.expect(missing.empty(), name, "the message does not name " + missing + ": " + e.what());
  } catch (const rt::Error& e) {
    report.fail(name, std::string("wrong exception type: ") + e.what());
  }
}

// An environment change undone at scope exit (single-threaded: before any group exists).
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    const char* old = std::getenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    if (old != nullptr) {
      old_ = old;
    }
    if (value == nullptr) {
      unsetenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    } else {
      setenv(name_.c_str(), value, 1);  // NOLINT(concurrency-mt-unsafe)
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      unsetenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ScopedEnv(ScopedEnv&&) = delete;
  ScopedEnv& operator=(ScopedEnv&&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

int closedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) {
    close(fd);
  }
  return port;
}

void checkEnvironment(Reporter& report) {
  rt::InitOptions quiet;
  quiet.installErrorHandlers = false;
  const auto initFails = [&](const std::string& name, const std::vector<std::string>& parts) {
    expectThrow<rt::ConfigError>(report, name, parts, [&] { (void)rt::init(quiet); });
  };
  {
    const ScopedEnv e("RANK", nullptr);
    initFails("errors init: RANK unset", {"RANK", "dtrun"});
  }
  {
    const ScopedEnv e("RANK", "abc");
    initFails("errors init: RANK=abc", {"RANK", "abc"});
  }
  {
    const ScopedEnv e("RANK", "7");
    initFails("errors init: RANK >= WORLD_SIZE", {"RANK", "WORLD_SIZE"});
  }
  {
    const ScopedEnv e("WORLD_SIZE", "0");
    initFails("errors init: WORLD_SIZE=0", {"WORLD_SIZE"});
  }
  {
    const ScopedEnv e("MASTER_ADDR", nullptr);
    initFails("errors init: MASTER_ADDR unset", {"MASTER_ADDR"});
  }
  {
    const ScopedEnv e("MASTER_PORT", "70000");
    initFails("errors init: MASTER_PORT=70000", {"MASTER_PORT", "70000"});
  }
  {
    const ScopedEnv e("DTRUN_TIMEOUT", "soon");
    initFails("errors init: DTRUN_TIMEOUT=soon", {"DTRUN_TIMEOUT"});
  }
  {
    const std::string port = std::to_string(closedPort());
    const ScopedEnv e("MASTER_PORT", port.c_str());
    rt::InitOptions fast = quiet;
    fast.timeout = std::chrono::milliseconds(1000);
    const auto start = Clock::now();
    expectThrow<rt::TimeoutError>(report, "errors init: store not listening -> TimeoutError",
                                  {port}, [&] { (void)rt::init(fast); });
    const double took = secondsSince(start);
    report.expect(took < 5, "errors init: store not listening gives up after its timeout",
                  "took " + std::to_string(took) + " s with a 1 s timeout");
  }
}

int runErrors(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("errors", "unknown backend '" + backendName + "'");
    return 1;
  }
  checkEnvironment(report);
  expectThrow<rt::ConfigError>(report, "errors create without init()", {"init"},
                               [&] { (void)rt::ProcessGroup::create(rt::Context{}, *backend); });
  const rt::Context ctx = rt::init();
  if (!rt::backendAvailable(rt::Backend::kNccl)) {
    expectThrow<rt::ConfigError>(report, "errors create nccl where not built", {"nccl"},
                                 [&] { (void)rt::ProcessGroup::create(ctx, rt::Backend::kNccl); });
  }
  report.expect(std::string(rt::dataTypeName(rt::DataType::kBFloat16)) == "bf16" &&
                    std::string(rt::reduceOpName(rt::ReduceOp::kAvg)) == "avg" &&
                    std::string(rt::backendName(rt::Backend::kGloo)) == "gloo" &&
                    rt::elementSize(rt::DataType::kFloat16) == 2 &&
                    rt::elementSize(rt::DataType::kInt64) == 8,
                "errors names and sizes", "dataTypeName/reduceOpName/backendName/elementSize");
  std::unique_ptr<rt::ProcessGroup> pg;
  guarded(report, "errors create " + backendName,
          [&] { pg = rt::ProcessGroup::create(ctx, *backend); });
  if (!pg) {
    return 1;
  }
  const int n = pg->size();
  const int me = pg->rank();
  const std::string big = std::to_string(n);
  // Buffers of the backend's kind (CUDA memory for nccl), so that each call is refused for the
  // reason it names, not for the buffer's device.
  const bool cuda = *backend == rt::Backend::kNccl;
  const auto count = static_cast<std::size_t>(n);
  Mem f(rt::DataType::kFloat32, 4 * count + 1, cuda);
  Mem i32(rt::DataType::kInt32, 4 * count, cuda);
  const rt::Buffer odd = f.buffer();
  rt::Buffer one = odd;
  one.count = 4;
  rt::Buffer all = odd;
  all.count = 4 * count;
  const auto bad = [&](const std::string& name, const std::vector<std::string>& parts,
                       const std::function<void()>& body) {
    expectThrow<rt::ConfigError>(report, "errors " + name, parts, body);
  };
  bad("send to itself", {"send", std::to_string(me)}, [&] { pg->send(one, me); });
  bad("send to rank size()", {"send", big}, [&] { pg->send(one, n); });
  bad("recv from rank -1", {"recv", "-1"}, [&] { pg->recv(one, -1); });
  bad("isend to rank size()+3", {"isend", std::to_string(n + 3)},
      [&] { (void)pg->isend(one, n + 3); });
  bad("irecv from itself", {"irecv"}, [&] { (void)pg->irecv(one, me); });
  bad("broadcast root size()", {"broadcast", "root", big}, [&] { pg->broadcast(one, n); });
  bad("reduce root -1", {"reduce", "root"}, [&] { pg->reduce(one, -1); });
  bad("gather root size()", {"gather", "root"}, [&] { pg->gather(one, all, n); });
  bad("scatter root -2", {"scatter", "root"}, [&] { pg->scatter(all, one, -2); });
  bad("all_gather output too small", {"all_gather"}, [&] { pg->allGather(one, odd); });
  bad("all_gather dtype mismatch", {"all_gather", "f32", "i32"},
      [&] { pg->allGather(one, i32.buffer()); });
  bad("reduce_scatter wrong input size", {"reduce_scatter"}, [&] { pg->reduceScatter(odd, one); });
  if (n > 1) {
    bad("all_to_all count not a multiple of size()", {"all_to_all"},
        [&] { pg->allToAll(odd, odd); });
  }
  bad("all_reduce null data", {"null"}, [&] {
    rt::Buffer b = one;
    b.data = nullptr;
    pg->allReduce(b);
  });
  bad(cuda ? "all_reduce CPU buffer on the nccl backend"
           : "all_reduce CUDA buffer on a CPU backend",
      {cuda ? "CUDA" : "CPU"}, [&] {
        rt::Buffer b = one;
        b.device = cuda ? rt::Device::kCpu : rt::Device::kCuda;
        pg->allReduce(b);
      });
  bad("new_group empty", {"new_group"}, [&] { (void)pg->newGroup({}); });
  bad("new_group duplicates", {"new_group"}, [&] { (void)pg->newGroup({0, 0}); });
  bad("new_group rank size()", {"new_group", big}, [&] { (void)pg->newGroup({0, n}); });
  // Nothing above may have disturbed the group.
  guarded(report, "errors group usable after rejected calls", [&] {
    Mem m(rt::DataType::kFloat32, 5, cuda);
    const std::vector<float> mine(5, static_cast<float>(me + 1));
    const auto* raw = reinterpret_cast<const std::byte*>(mine.data());
    m.write(Bytes(raw, raw + sizeof(float) * mine.size()));
    pg->allReduce(m.buffer());
    const Bytes back = m.read();
    std::vector<float> v(5);
    std::memcpy(v.data(), back.data(), back.size());
    const float want = static_cast<float>(n * (n + 1)) / 2;
    report.expect(v[0] == want && v[4] == want, "errors group usable after rejected calls",
                  "all_reduce gave " + std::to_string(v[0]));
    auto sub = pg->newGroup({0});
    report.expect((me == 0) == (sub != nullptr), "errors new_group after rejected new_group calls",
                  "membership wrong");
    pg->barrier();
  });
  report.pass("errors all checks ran");
  return report.exitCode();
}

int runNoEnv(Reporter& report) {
  rt::InitOptions quiet;
  quiet.installErrorHandlers = false;
  expectThrow<rt::ConfigError>(report, "noenv init() outside dtrun", {"RANK", "dtrun"},
                               [&] { (void)rt::init(quiet); });
  return report.exitCode();
}

int usage() {
  (void)std::fprintf(stderr,
                     "usage: dtrt_check_worker ops <tcp|gloo|nccl> | "
                     "early-exit <tcp|gloo> <collective|create|kill> | attempt <tcp|gloo> | "
                     "errors <tcp|gloo> | noenv\n");
  return 2;
}

// The error file and worker logging, as a user would see them: through dtrun's failure report
// and the per-rank logs. Rank 1 dies; rank 0 stays until dtrun stops it.
int runDie(const std::string& how) {
  const auto context = rt::init();
  const auto group = rt::ProcessGroup::create(context, rt::Backend::kTcp);
  if (context.rank == 0) {
    rt::logDebug("debug line from the worker");
    rt::logInfo("info line from the worker");
    rt::logWarn("warn line from the worker");
  }
  group->barrier();  // rank 0 has logged before rank 1 dies
  if (context.rank == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  if (context.rank == 1) {
    if (how == "throw") {
      throw std::runtime_error("boom from rank 1");
    }
    // Raised rather than provoked: UBSan would stop a null store before it could fault.
    static_cast<void>(std::raise(SIGSEGV));
  }
  return 0;
}

int run(const std::vector<std::string>& args) {
  Reporter report;
  const std::string mode = args.empty() ? "" : args[0];
  const std::string arg1 = args.size() > 1 ? args[1] : "";
  if (mode == "ops" && args.size() == 2) {
    return runOps(report, arg1);
  }
  if (mode == "early-exit" && args.size() == 3) {
    return runEarlyExit(report, arg1, args[2]);
  }
  if (mode == "attempt" && args.size() == 2) {
    return runAttempt(report, arg1);
  }
  if (mode == "errors" && args.size() == 2) {
    return runErrors(report, arg1);
  }
  if (mode == "noenv" && args.size() == 1) {
    return runNoEnv(report);
  }
  if (mode == "die" && args.size() == 2 && (arg1 == "throw" || arg1 == "segv")) {
    return runDie(arg1);
  }
  return usage();
}

}  // namespace
}  // namespace dtrt_check

// NOLINTNEXTLINE(bugprone-exception-escape): `die throw` must escape, on purpose
int main(int argc, char** argv) {
  // `die throw` must reach std::terminate (and libdtrt's error file) uncaught.
  if (argc == 3 && std::string(argv[1]) == "die") {
    return dtrt_check::run(std::vector<std::string>(argv + 1, argv + argc));
  }
  try {
    return dtrt_check::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::printf("FAIL uncaught exception: %s\n", e.what());
    (void)std::fflush(stdout);
    return 1;
  }
}
