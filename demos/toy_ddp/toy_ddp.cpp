// toy_ddp: the seed's ToyModel DDP example (Linear(10,10) -> ReLU -> Linear(10,5), MSELoss, SGD)
// on libdtrt through dtrun::ddp, plus a deterministic mode the integration test uses to check
// that N-rank DDP equals one process training on the union of the N ranks' batches.
//
// Usage:
//   build/launcher/dtrun --nproc_per_node=2 --no_python build/demos/toy_ddp/toy_ddp
// prints, on each rank (in its log or on the console with --tee 3):
//   Running basic DDP example on rank 0.
//   rank 0: step 0 loss 1.0473 (2 ranks, 1 bucket)
//
// Deterministic mode (every rank draws batch (step, rank) from a generator seeded with
// seed/step/rank; the model is initialised with seed + rank, so only the broadcast makes it
// agree):
//   dtrun --nproc_per_node=2 --no_python toy_ddp --steps 5 --batch 8 --dump /tmp/p
//     -> /tmp/p.0 and /tmp/p.1 hold every parameter value after 5 steps, one per line
//   dtrun --nproc_per_node=1 --no_python toy_ddp --steps 5 --batch 8 --emulate-ranks 2 --dump
//   /tmp/r
//     -> one process, each step on the concatenation of batches (step, 0) and (step, 1)
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include "dtrun/ddp.h"
#include "dtrun/runtime.h"

namespace {

namespace rt = dtrun::runtime;

struct ToyModelImpl : torch::nn::Module {
  ToyModelImpl()
      : net1(register_module("net1", torch::nn::Linear(10, 10))),
        net2(register_module("net2", torch::nn::Linear(10, 5))) {}
  torch::Tensor forward(const torch::Tensor& x) { return net2(torch::relu(net1(x))); }
  torch::nn::Linear net1;
  torch::nn::Linear net2;
};
TORCH_MODULE(ToyModel);

struct Args {
  int steps = 1;
  int batch = 20;
  double lr = 0.001;
  double momentum = 0.0;
  std::uint64_t seed = 0;
  int emulateRanks = 0;  // > 0: one process on the union of that many ranks' batches
  std::string dump;
  std::size_t bucketBytes = std::size_t{25} << 20;
  bool noOverlap = false;
  std::string backend = "tcp";
};

// Batch (step, rank) of the deterministic mode: inputs [batch, 10], targets [batch, 5].
std::pair<torch::Tensor, torch::Tensor> batchOf(const Args& args, int step, int rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(args.seed * 1000003ULL +
                                                      static_cast<std::uint64_t>(step) * 1009ULL +
                                                      static_cast<std::uint64_t>(rank));
  auto x = torch::randn({args.batch, 10}, gen);
  auto y = torch::randn({args.batch, 5}, gen);
  return {x, y};
}

void dumpParameters(const ToyModel& model, const std::string& path) {
  std::ofstream out(path);
  out << std::setprecision(9);
  for (const auto& p : model->parameters()) {
    const auto flat = p.detach().reshape(-1).contiguous();
    const auto* v = flat.data_ptr<float>();
    for (std::int64_t i = 0; i < flat.numel(); ++i) {
      out << v[i] << '\n';
    }
  }
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

int run(const Args& args) {
  const auto ctx = rt::init();
  std::cout << "Running basic DDP example on rank " << ctx.rank << "." << std::endl;
  torch::manual_seed(args.seed + static_cast<std::uint64_t>(ctx.rank));
  auto model = ToyModel();

  dtrun::ddp::Options options;
  options.bucketBytes = args.bucketBytes;
  options.overlap = !args.noOverlap;
  const auto group = rt::ProcessGroup::create(
      ctx, args.backend == "gloo" ? rt::Backend::kGloo : rt::Backend::kTcp);
  dtrun::ddp::DistributedDataParallel ddp(*group, model.ptr(), options);

  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(args.lr).momentum(args.momentum));
  torch::nn::MSELoss lossFn;
  for (int step = 0; step < args.steps; ++step) {
    torch::Tensor x;
    torch::Tensor y;
    if (args.emulateRanks > 0) {
      std::vector<torch::Tensor> xs;
      std::vector<torch::Tensor> ys;
      for (int r = 0; r < args.emulateRanks; ++r) {
        auto [bx, by] = batchOf(args, step, r);
        xs.push_back(bx);
        ys.push_back(by);
      }
      x = torch::cat(xs);
      y = torch::cat(ys);
    } else {
      std::tie(x, y) = batchOf(args, step, ctx.rank);
    }
    ddp.prepareForward();
    optimizer.zero_grad();
    auto loss = lossFn(model->forward(x), y);
    loss.backward();
    ddp.synchronizeGradients();
    optimizer.step();
    std::cout << "rank " << ctx.rank << ": step " << step << " loss " << std::fixed
              << std::setprecision(4) << loss.item<float>() << std::defaultfloat << " ("
              << ddp.size() << " ranks, " << ddp.bucketCount() << " bucket"
              << (ddp.bucketCount() == 1 ? "" : "s") << ")" << std::endl;
  }
  if (!args.dump.empty()) {
    dumpParameters(model, args.dump + "." + std::to_string(ctx.rank));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything, option set-up included, inside the try: no exception escapes main.
  try {
    CLI::App app{"toy_ddp: the seed's ToyModel trained with dtrun::ddp (run it under dtrun)"};
    Args args;
    app.add_option("--steps", args.steps, "Training steps")->capture_default_str();
    app.add_option("--batch", args.batch, "Batch size per rank")->capture_default_str();
    app.add_option("--lr", args.lr, "SGD learning rate")->capture_default_str();
    app.add_option("--momentum", args.momentum, "SGD momentum")->capture_default_str();
    app.add_option("--seed", args.seed, "Seed for data and (seed + rank) initialisation")
        ->capture_default_str();
    app.add_option("--emulate-ranks", args.emulateRanks,
                   "Train on the union of this many ranks' batches (reference run, 1 process)");
    app.add_option("--dump", args.dump, "Write the final parameters to DUMP.<rank>");
    app.add_option("--bucket-bytes", args.bucketBytes, "DDP bucket size")->capture_default_str();
    app.add_flag("--no-overlap", args.noOverlap, "All-reduce after backward instead of during it");
    app.add_option("--backend", args.backend, "CPU backend")
        ->check(CLI::IsMember({"tcp", "gloo"}))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "toy_ddp: " << e.what() << std::endl;
    rt::recordError(e.what());
    return 1;
  }
}
