#include <string>
#include <string_view>
#include <vector>

#include "dtrun/scheduler.h"

#include "fuzz_targets.h"

namespace dtrun::fuzz {
namespace {

constexpr std::string_view kHostlist = "hostlist";

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

void hostlist(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return;
  }
  // First byte: the --scheduler mode. Then lines: each one is tried as a host list and as a
  // count list, and "NAME=value" lines form the environment detect() reads ("PBS_NODEFILE=f"
  // makes the nodefile the text after the first empty line).
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): fuzz input is raw bytes
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t blank = text.find("\n\n");
  const std::string_view head = text.substr(0, blank);
  const std::string nodefile(blank == std::string_view::npos ? "" : text.substr(blank + 2));

  scheduler::JobEnvironment job;
  job.hostName = "node2";
  job.readFile = [&nodefile](const std::string&) { return std::optional<std::string>(nodefile); };
  for (const std::string_view line : lines(head)) {
    if (auto hosts = scheduler::expandHostlist(line); hosts.isOk()) {
      assertInvariant(hosts.value().size() <= scheduler::kMaxHosts, kHostlist,
                      "a host list expands past kMaxHosts");
      for (const auto& host : hosts.value()) {
        assertInvariant(!host.empty(), kHostlist, "a host list yields an empty host name");
      }
    } else {
      assertOneLineError(kHostlist, hosts.status().message());
    }
    if (auto counts = scheduler::expandCounts(line); !counts.isOk()) {
      assertOneLineError(kHostlist, counts.status().message());
    }
    const std::size_t equals = line.find('=');
    if (equals != std::string_view::npos) {
      job.env[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
    }
  }
  const auto modes = {scheduler::Mode::kAuto, scheduler::Mode::kSlurm,   scheduler::Mode::kPbs,
                      scheduler::Mode::kNone, scheduler::Mode::kLsf,     scheduler::Mode::kFlux,
                      scheduler::Mode::kMpi,  scheduler::Mode::kKubeflow};
  const scheduler::Mode mode = *(modes.begin() + data[0] % modes.size());
  const auto allocation = scheduler::detect(mode, job);
  if (!allocation.isOk()) {
    assertOneLineError(kHostlist, allocation.status().message());
    return;
  }
  if (const auto& a = allocation.value()) {
    // MPI launchers, Flux and Kubeflow's pods name no hosts; the others name one per node.
    assertInvariant(a->hosts.empty() || a->hosts.size() == static_cast<std::size_t>(a->nodeCount),
                    kHostlist, "a host list that is not one host per node");
    assertInvariant(!a->hosts.empty() || a->kind == scheduler::Kind::kMpi ||
                        a->kind == scheduler::Kind::kFlux || a->kind == scheduler::Kind::kKubeflow,
                    kHostlist, "a batch allocation without hosts");
    assertInvariant(a->nodeIndex >= 0 && a->nodeIndex < a->nodeCount, kHostlist,
                    "this node's index is outside the node count");
    assertInvariant(!a->master.empty() || !a->masterMissing.empty(), kHostlist,
                    "no first host and no reason why");
    static_cast<void>(scheduler::jobPort(*a));
  }
}

}  // namespace dtrun::fuzz
