// The job's stacks in one text, ranks with identical stacks together (`ranks 0-2, 4: ...
// all_reduce`, `rank 3: ... load_batch`): what `dtrun stacks` prints. A rank's stack is its
// Python stacks (faulthandler's, every thread) and its main thread's native stack, with what
// differs between identical ranks taken out (addresses, thread ids, frame numbers). Pure
// functions and plain data with its JSON form (a node's answer through the store);
// thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrun::agent::detail {

struct RankStacks {
  int rank = 0;
  int node = 0;  // the node rank
  std::string host;
  int pid = 0;
  std::string python;  // faulthandler's text; "" when the worker has no Python hook
  std::string native;  // the main thread's frames as the native tool printed them
};

// One node's answer to a request: its running ranks' stacks.
struct NodeStacks {
  int node = 0;
  std::string host;
  std::vector<RankStacks> ranks;
};

nlohmann::json toJson(const NodeStacks& node);
// Back from toJson's form (another node's, through the store); nullopt when it is not one.
std::optional<NodeStacks> nodeStacksFromJson(const nlohmann::json& json);

// The main thread's part of eu-stack's ("TID <pid>:") or gdb's ("(LWP <pid>)") text of every
// thread of `pid`; the whole text when neither marks it.
std::string mainThreadOf(std::string_view native, int pid);
// Frames only: the function of each native frame; each Python thread as "Thread", its frames
// kept (file, line, function).
std::string normalisedNative(std::string_view native);
std::string normalisedPython(std::string_view python);

// "rank 3" or "ranks 0-2, 4-7".
std::string rankList(const std::vector<int>& ranks);

// The grouped text: `heading` (one line), then a section per group of identical stacks, the
// largest group first (ties: the lowest rank first), then `notes` (a node that did not answer,
// ...), one a line.
std::string groupStacks(const std::string& heading, const std::vector<RankStacks>& ranks,
                        const std::vector<std::string>& notes);

}  // namespace dtrun::agent::detail
