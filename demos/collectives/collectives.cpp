// collectives: the seeds' six collectives, first on the world, then on a sub-group made with
// new_group (the seed's [0, 1] unless --group says otherwise). Each rank holds a one-element
// float tensor [rank + 1]; roots are the group's first rank; the scatter list holds 10, 20, ...
// Each rank prints one line per collective: what it holds before and after.
//
// Usage:
//   build/launcher/dtrun --nproc_per_node=3 --no_python build/demos/collectives/collectives
//       [--backend=tcp|gloo] [--group=0,1]
// Output of rank 1 of 3 (tcp, default group):
//   [world tcp] broadcast(src=0): rank 1 before [2.0] after [1.0]
//   [world tcp] reduce(dst=0, SUM): rank 1 before [2.0] after [2.0]
//   [world tcp] all_reduce(SUM): rank 1 before [2.0] after [6.0]
//   [world tcp] scatter(src=0): rank 1 before tensor [0.0] after tensor [20.0]
//   [world tcp] gather(dst=0): rank 1 before tensor [2.0] after tensor [2.0]
//   [world tcp] all_gather: rank 1 before tensor [2.0] tensor_list [0.0, 0.0, 0.0] after
//       tensor_list [1.0, 2.0, 3.0]
//   [group [0, 1] tcp] broadcast(src=0): rank 1 before [2.0] after [1.0]
//   ...
// Rank 0, the root, also shows reduce's sum, the scatter_list it sends and the gather_list it
// fills; a rank outside the group prints one line saying so. src/dst are world ranks, as in
// torch.distributed.
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

constexpr std::string_view kUsage =
    "usage: collectives [--backend=tcp|gloo] [--group=R,R,...]\n"
    "  run under dtrun: dtrun --nproc_per_node=3 --no_python build/demos/collectives/collectives\n";

struct Options {
  rt::Backend backend = rt::Backend::kTcp;
  std::vector<int> group;  // empty: the seed's [0, 1] (just [0] in a world of one)
};

// "--group=3,1" -> {3, 1}; false on anything but a comma-separated list of ranks.
bool parseRanks(std::string_view text, std::vector<int>* ranks) {
  while (!text.empty()) {
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec != std::errc() || rank < 0) {
      return false;
    }
    ranks->push_back(rank);
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    if (!text.empty()) {
      if (text.front() != ',' || text.size() == 1) {
        return false;
      }
      text.remove_prefix(1);
    }
  }
  return !ranks->empty();
}

bool parseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--backend=tcp") {
      options->backend = rt::Backend::kTcp;
    } else if (arg == "--backend=gloo") {
      options->backend = rt::Backend::kGloo;
    } else if (arg.starts_with("--group=")) {
      if (!parseRanks(arg.substr(std::string_view("--group=").size()), &options->group)) {
        (void)std::fprintf(stderr, "collectives: --group: expected ranks like 0,1, got '%s'\n%s",
                           argv[i], kUsage.data());
        return false;
      }
    } else {
      (void)std::fprintf(stderr, "collectives: unknown argument '%s'\n%s", argv[i], kUsage.data());
      return false;
    }
  }
  return true;
}

// [1.0, 2.0, 3.0]
std::string show(std::span<const float> values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::array<char, 32> number{};
    (void)std::snprintf(number.data(), number.size(), "%.1f", static_cast<double>(values[i]));
    text += (i == 0 ? "" : ", ") + std::string(number.data());
  }
  return text + "]";
}

// Runs the six collectives on `group`, whose rank g is world rank worldRanks[g].
class Demo {
 public:
  Demo(rt::ProcessGroup& group, std::vector<int> worldRanks, std::string scope)
      : group_(group), worldRanks_(std::move(worldRanks)), scope_(std::move(scope)) {}

  void runAll() {
    broadcast();
    reduce();
    allReduce();
    scatter();
    gather();
    allGather();
  }

 private:
  [[nodiscard]] int worldRank() const { return worldRanks_[static_cast<std::size_t>(rank())]; }
  [[nodiscard]] int rank() const { return group_.rank(); }
  [[nodiscard]] int size() const { return group_.size(); }
  [[nodiscard]] bool isRoot() const { return rank() == kRoot; }
  [[nodiscard]] std::string root() const { return std::to_string(worldRanks_[0]); }
  // This rank's contribution: [world rank + 1].
  [[nodiscard]] std::array<float, 1> own() const { return {static_cast<float>(worldRank() + 1)}; }

  void say(const std::string& op, const std::string& before, const std::string& after) const {
    std::printf("[%s] %s: rank %d before %s after %s\n", scope_.c_str(), op.c_str(), worldRank(),
                before.c_str(), after.c_str());
    (void)std::fflush(stdout);
  }

  void broadcast() {
    std::array<float, 1> tensor = own();
    const std::string before = show(tensor);
    group_.broadcast(rt::view(std::span<float>(tensor)), kRoot);
    say("broadcast(src=" + root() + ")", before, show(tensor));
  }

  void reduce() {
    std::array<float, 1> tensor = own();
    const std::string before = show(tensor);
    group_.reduce(rt::view(std::span<float>(tensor)), kRoot, rt::ReduceOp::kSum);
    say("reduce(dst=" + root() + ", SUM)", before, show(tensor));
  }

  void allReduce() {
    std::array<float, 1> tensor = own();
    const std::string before = show(tensor);
    group_.allReduce(rt::view(std::span<float>(tensor)), rt::ReduceOp::kSum);
    say("all_reduce(SUM)", before, show(tensor));
  }

  void scatter() {
    std::array<float, 1> tensor = {0.0F};
    std::vector<float> scatterList;  // used on the root only: 10, 20, ... for group ranks 0, 1, ...
    std::string before = "tensor " + show(tensor);
    if (isRoot()) {
      for (int g = 0; g < size(); ++g) {
        scatterList.push_back(static_cast<float>(10 * (g + 1)));
      }
      before = "scatter_list " + show(scatterList) + " " + before;
    }
    group_.scatter(rt::view(std::span<float>(scatterList)), rt::view(std::span<float>(tensor)),
                   kRoot);
    say("scatter(src=" + root() + ")", before, "tensor " + show(tensor));
  }

  void gather() {
    std::array<float, 1> tensor = own();
    std::vector<float> gatherList;  // filled on the root only
    std::string before = "tensor " + show(tensor);
    if (isRoot()) {
      gatherList.assign(static_cast<std::size_t>(size()), 0.0F);
      before += " gather_list " + show(gatherList);
    }
    group_.gather(rt::view(std::span<float>(tensor)), rt::view(std::span<float>(gatherList)),
                  kRoot);
    say("gather(dst=" + root() + ")", before,
        isRoot() ? "gather_list " + show(gatherList) : "tensor " + show(tensor));
  }

  void allGather() {
    std::array<float, 1> tensor = own();
    std::vector<float> tensorList(static_cast<std::size_t>(size()), 0.0F);
    const std::string before = "tensor " + show(tensor) + " tensor_list " + show(tensorList);
    group_.allGather(rt::view(std::span<float>(tensor)), rt::view(std::span<float>(tensorList)));
    say("all_gather", before, "tensor_list " + show(tensorList));
  }

  static constexpr int kRoot = 0;  // group rank of every collective's src/dst
  rt::ProcessGroup& group_;        // owned by run(), which outlives this Demo
  const std::vector<int> worldRanks_;
  const std::string scope_;
};

std::string listText(const std::vector<int>& ranks) {
  std::string text = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text + "]";
}

int run(Options options) {
  const rt::Context ctx = rt::init();
  const auto world = rt::ProcessGroup::create(ctx, options.backend);
  const std::string backend = rt::backendName(options.backend);

  std::vector<int> everyone;
  everyone.reserve(static_cast<std::size_t>(ctx.worldSize));
  for (int r = 0; r < ctx.worldSize; ++r) {
    everyone.push_back(r);
  }
  Demo(*world, everyone, "world " + backend).runAll();

  if (options.group.empty()) {
    options.group = ctx.worldSize >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0};
  }
  // Every rank calls new_group with the same list; non-members get no group.
  const auto sub = world->newGroup(options.group);
  const std::string scope = "group " + listText(options.group) + " " + backend;
  if (sub != nullptr) {
    Demo(*sub, options.group, scope).runAll();
  } else {
    std::printf("[%s] rank %d is not in the group\n", scope.c_str(), ctx.rank);
    (void)std::fflush(stdout);
  }
  world->barrier();  // no rank tears its connections down while another still uses them
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parseArgs(argc, argv, &options)) {
    return 2;
  }
  try {
    return run(std::move(options));
  } catch (const std::exception& e) {
    (void)std::fprintf(stderr, "collectives: %s\n", e.what());
    return 1;
  }
}
