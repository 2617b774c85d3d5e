// p2p: the seeds' point-to-point walk-through. Every rank holds a one-element float tensor of
// 0.0. Blocking: rank 0 adds 1 and send()s it to every other rank, which recv()s it in place.
// Non-blocking: rank 0 sets 2.0 and isend()s it to every other rank, which irecv()s it; both
// sides go on at once and only Work::wait() says the transfer took place.
//
// Usage:
//   build/launcher/dtrun --nproc_per_node=4 --no_python build/demos/p2p/p2p [--backend=tcp|gloo]
// Output of rank 0, then of rank 2 (one stdout per rank; dtrun --log_dir keeps them apart):
//   [send/recv] Rank 0 has data 0.0 (before)
//   [send/recv] Rank 0 has data 1.0 (after send to ranks 1, 2, 3)
//   [isend/irecv] Rank 0 has data 0.0 (before)
//   [isend/irecv] Rank 0 started sending
//   [isend/irecv] Rank 0 has data 2.0 (after wait)
//
//   [send/recv] Rank 2 has data 0.0 (before)
//   [send/recv] Rank 2 has data 1.0 (after recv from rank 0)
//   [isend/irecv] Rank 2 has data 0.0 (before)
//   [isend/irecv] Rank 2 started receiving
//   [isend/irecv] Rank 2 has data 2.0 (after wait)
// The seed also prints the receiver's tensor between irecv and wait ("might still be 0.0"); in
// C++ that read would be a data race with the transfer, so this demo never reads the buffer
// before wait() and prints "started receiving" alone.
#include <array>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

constexpr std::string_view kUsage =
    "usage: p2p [--backend=tcp|gloo]\n"
    "  run under dtrun: dtrun --nproc_per_node=4 --no_python build/demos/p2p/p2p\n";

void say(const char* phase, const std::string& text) {
  std::printf("[%s] %s\n", phase, text.c_str());
  (void)std::fflush(stdout);
}

std::string hasData(int rank, float value, const std::string& when) {
  std::array<char, 64> number{};
  (void)std::snprintf(number.data(), number.size(), "%.1f", static_cast<double>(value));
  return "Rank " + std::to_string(rank) + " has data " + number.data() + " (" + when + ")";
}

// "ranks 1, 2, 3" or "rank 1".
std::string otherRanks(int worldSize) {
  std::string text = worldSize == 2 ? "rank" : "ranks";
  for (int r = 1; r < worldSize; ++r) {
    text += (r == 1 ? " " : ", ") + std::to_string(r);
  }
  return text;
}

void blocking(rt::ProcessGroup& group) {
  const int rank = group.rank();
  std::array<float, 1> tensor = {0.0F};
  say("send/recv", hasData(rank, tensor[0], "before"));
  if (rank == 0) {
    tensor[0] += 1.0F;
    // Send the tensor to every other rank; send() returns once the data is handed over.
    for (int other = 1; other < group.size(); ++other) {
      group.send(rt::view(std::span<float>(tensor)), other);
    }
    say("send/recv", hasData(rank, tensor[0], "after send to " + otherRanks(group.size())));
  } else {
    // Receive the tensor from rank 0 into this rank's own, pre-allocated buffer.
    group.recv(rt::view(std::span<float>(tensor)), 0);
    say("send/recv", hasData(rank, tensor[0], "after recv from rank 0"));
  }
}

void nonBlocking(rt::ProcessGroup& group) {
  const int rank = group.rank();
  std::array<float, 1> tensor = {0.0F};
  say("isend/irecv", hasData(rank, tensor[0], "before"));
  std::vector<rt::Work> requests;
  if (rank == 0) {
    tensor[0] = 2.0F;
    for (int other = 1; other < group.size(); ++other) {
      requests.push_back(group.isend(rt::view(std::span<float>(tensor)), other));
    }
    say("isend/irecv", "Rank 0 started sending");
  } else {
    requests.push_back(group.irecv(rt::view(std::span<float>(tensor)), 0));
    say("isend/irecv", "Rank " + std::to_string(rank) + " started receiving");
  }
  for (rt::Work& request : requests) {
    request.wait();  // only now is the transfer guaranteed to have taken place
  }
  say("isend/irecv", hasData(rank, tensor[0], "after wait"));
}

int run(rt::Backend backend) {
  const rt::Context ctx = rt::init();
  const auto group = rt::ProcessGroup::create(ctx, backend);
  blocking(*group);
  nonBlocking(*group);
  group->barrier();  // no rank tears its connections down while another still uses them
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  rt::Backend backend = rt::Backend::kTcp;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--backend=tcp") {
      backend = rt::Backend::kTcp;
    } else if (arg == "--backend=gloo") {
      backend = rt::Backend::kGloo;
    } else {
      (void)std::fprintf(stderr, "p2p: unknown argument '%s'\n%s", argv[i], kUsage.data());
      return 2;
    }
  }
  try {
    return run(backend);
  } catch (const std::exception& e) {
    (void)std::fprintf(stderr, "p2p: %s\n", e.what());
    return 1;
  }
}
