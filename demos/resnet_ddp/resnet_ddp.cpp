// resnet_ddp: the seed's resnet_ddp.py in C++: ResNet-18 (CIFAR variant: 3x3 stem, no max-pool)
// trained on CIFAR-10 with dtrun::ddp over libdtrt, one process per rank. Reads the official
// binary files (data_batch_1..5.bin, test_batch.bin: records of 1 label byte + 3072 pixel
// bytes, R, G, B planes of 32x32); augments with a random 32x32 crop of the zero-padded 40x40
// image and a random horizontal flip; normalises like the seed. Rank 0 evaluates on
// test_batch.bin and saves a checkpoint (model, optimizer, next epoch) after every epoch;
// --resume loads it on every rank and continues with the next epoch. --device cuda trains on the
// rank's GPU (cuda:LOCAL_RANK) with a kNccl group, the data set held on the GPU.
//
// Speed: the loop never waits for the GPU inside an epoch except at log points (the host queues
// steps ahead); --precision bf16 runs forward and loss under bf16 autocast, --channels-last
// keeps convolution weights and inputs NHWC, and --cuda-graph (GPU builds of
// scripts/gpu/build_resnet_ddp.sh, one rank) replays the whole step as one CUDA graph. step.h
// and cuda_step.h hold those parts.
//
// Usage:
//   scripts/make-cifar10-sample /tmp/cifar --train 2000 --test 500     # or the real data set
//   mkdir -p saved_models
//   build/launcher/dtrun --nproc_per_node=2 --tee 3 --no_python build/demos/resnet_ddp/resnet_ddp
//       --data-dir /tmp/cifar --num_epochs 2 --batch_size 32 --width 16
// prints, from rank 0:
//   resnet_ddp: 2 ranks, 2000 train / 500 test images, ResNet-18 width 16 (...)
//   epoch 1/2 step 10/32 loss 2.1325 images/s 210.4 eta 0:00:21
//   epoch 1/2: test accuracy 0.4120 (500 images), checkpoint saved_models/resnet_distributed.pth
//   ...
//   throughput: 221.7 images/s (2 ranks, 62 steps after 2 warm-up, ..., precision fp32, ...)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include "dtrun/ddp.h"
#include "dtrun/runtime.h"

#include "checkpoint.h"
#include "cifar.h"
#include "cuda_step.h"
#include "model.h"
#include "step.h"
#include "timing.h"

namespace {

namespace rt = dtrun::runtime;
namespace fs = std::filesystem;

using resnet_ddp::Dataset;
using resnet_ddp::loadCheckpoint;
using resnet_ddp::loadCifar;
using resnet_ddp::ResNet18;
using resnet_ddp::saveCheckpoint;
using resnet_ddp::StepInputs;
using resnet_ddp::StepTimer;

// ---- evaluation --------------------------------------------------------------------------

double evaluate(ResNet18& model, const Dataset& test, std::int64_t batch,
                const resnet_ddp::Normaliser& normalise) {
  const torch::NoGradGuard noGrad;
  model->eval();
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < test.size(); i += batch) {
    const auto n = std::min(batch, test.size() - i);
    const auto logits = model->forward(normalise(test.images.narrow(0, i, n)));
    correct += logits.argmax(1).eq(test.labels.narrow(0, i, n)).sum().item<std::int64_t>();
  }
  model->train();
  return test.size() > 0 ? static_cast<double>(correct) / static_cast<double>(test.size()) : 0.0;
}

// ---- training -----------------------------------------------------------------------------

// Eager steps before a CUDA graph is captured, as PyTorch's make_graphed_callables warms up:
// cuDNN's benchmark chooses its algorithms, cuBLAS makes its workspace and SGD its momentum
// buffers, none of which may happen under capture.
constexpr std::int64_t kGraphWarmupSteps = 3;

struct Args {
  int numEpochs = 5;
  int batchSize = 256;
  double learningRate = 0.1;
  std::uint64_t randomSeed = 0;
  std::string modelDir = "saved_models";
  std::string modelFilename = "resnet_distributed.pth";
  bool resume = false;
  std::string dataDir = "data/cifar-10-batches-bin";
  std::int64_t width = 64;
  int maxSteps = 0;     // per epoch; 0 = the whole shard
  int logEvery = 10;    // steps between progress lines
  int warmupSteps = 2;  // steps left out of the final throughput figure
  int threads = 0;      // torch intra-op threads; 0 = libtorch's default (OMP_NUM_THREADS)
  bool noEval = false;
  bool noSave = false;
  bool noAugment = false;
  bool noOverlap = false;
  std::size_t bucketKb = 25600;
  std::string backend = "tcp";
  std::string device = "cpu";
  std::string precision = "fp32";
  bool channelsLast = false;
  bool cudaGraph = false;
};

std::string hms(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, std::round(seconds)));
  std::ostringstream out;
  out << s / 3600 << ':' << std::setw(2) << std::setfill('0') << (s / 60) % 60 << ':'
      << std::setw(2) << std::setfill('0') << s % 60;
  return out.str();
}

const char* onOff(bool on) { return on ? "on" : "off"; }

// One training step's work, queued without a wait for the device, so the same code runs
// eagerly and under CUDA graph capture; under capture it touches only its inputs and tensors
// that outlive the graph (model, optimizer state, data set, lossSum).
class Training {
 public:
  Training(ResNet18& model, torch::optim::SGD& optimizer, dtrun::ddp::DistributedDataParallel& ddp,
           const Dataset& train, const resnet_ddp::Normaliser& normalise,
           const torch::Device& device, bool bf16, bool setToNone)
      : model_(model),
        optimizer_(optimizer),
        ddp_(ddp),
        train_(train),
        normalise_(normalise),
        device_(device),
        bf16_(bf16),
        setToNone_(setToNone),
        lossSum_(torch::zeros({}, torch::TensorOptions(torch::kFloat).device(device))) {}

  void step(const StepInputs& in, bool autocastCache) {
    auto images = train_.images.index_select(0, in.indices);
    if (in.crop.defined()) {
      images = resnet_ddp::cropAndFlip(images, in.crop);
    }
    const auto labels = train_.labels.index_select(0, in.indices);
    const auto x = normalise_(images);
    ddp_.prepareForward();
    resnet_ddp::zeroGrads(optimizer_, setToNone_);
    torch::Tensor loss;
    {
      // Forward and loss only, as Python's `with torch.autocast(...)` around them: backward
      // runs each op in the dtype its forward chose.
      std::optional<resnet_ddp::AutocastGuard> autocast;
      if (bf16_) {
        autocast.emplace(device_.type(), autocastCache);
      }
      loss = criterion_(model_->forward(x), labels);
    }
    loss.backward();
    ddp_.synchronizeGradients();
    optimizer_.step();
    lossSum_.add_(loss.detach());  // summed on the device: reading it each step would wait
  }

  // The losses summed since the last call (a wait for the device).
  double takeLossSum() {
    const auto sum = lossSum_.item<double>();
    lossSum_.zero_();
    return sum;
  }

 private:
  ResNet18& model_;
  torch::optim::SGD& optimizer_;
  dtrun::ddp::DistributedDataParallel& ddp_;
  const Dataset& train_;
  const resnet_ddp::Normaliser& normalise_;
  torch::nn::CrossEntropyLoss criterion_;
  torch::Device device_;
  bool bf16_;
  bool setToNone_;
  torch::Tensor lossSum_;
};

// Runs each step eagerly or, with a graph wanted, eagerly for kGraphWarmupSteps steps, then as
// replays of a graph captured at the next full batch. A batch of another size (an epoch's last)
// runs eagerly: a graph replays fixed shapes. A failed capture leaves the run eager.
class StepRunner {
 public:
  StepRunner(Training& training, bool wantGraph, std::int64_t batchSize, bool lead)
      : training_(training), wantGraph_(wantGraph), batchSize_(batchSize), lead_(lead) {}

  void run(const StepInputs& inputs, std::int64_t n, std::int64_t stepsDone) {
    if (graph_.ready() && n == batchSize_) {
      graph_.replay(inputs);
      return;
    }
    if (wantGraph_ && !tried_ && stepsDone >= kGraphWarmupSteps && n == batchSize_) {
      tried_ = true;
      if (captureGraph(inputs, stepsDone)) {
        graph_.replay(inputs);  // capture only recorded this step
        return;
      }
    }
    training_.step(inputs, /*autocastCache=*/true);
  }

  [[nodiscard]] bool graphUsed() const { return graph_.ready(); }

 private:
  bool captureGraph(const StepInputs& inputs, std::int64_t stepsDone) {
    const auto whyNot = graph_.capture(
        [this](const StepInputs& in, bool cache) { training_.step(in, cache); }, inputs);
    if (lead_) {
      if (whyNot) {
        std::cout << "cuda graph: not used: " << *whyNot << std::endl;
      } else {
        std::cout << "cuda graph: whole step captured after " << stepsDone
                  << " eager steps, replayed from step " << stepsDone + 1 << std::endl;
      }
    }
    return !whyNot;
  }

  Training& training_;
  bool wantGraph_;
  std::int64_t batchSize_;
  bool lead_;
  bool tried_ = false;
  resnet_ddp::GraphStep graph_;
};

// Everything the epoch loop uses, made by run().
struct Loop {
  const Args& args;
  const rt::Context& ctx;
  rt::ProcessGroup& group;
  dtrun::ddp::DistributedSampler& sampler;
  Training& training;
  StepRunner& runner;
  StepTimer& timer;
  ResNet18& model;
  torch::optim::SGD& optimizer;
  const Dataset& test;
  const resnet_ddp::Normaliser& normalise;
  torch::Device device;
  fs::path checkpoint;
  std::int64_t shard;
  std::int64_t stepsPerEpoch;
  std::int64_t totalSteps;
  std::int64_t stepsDone = 0;
  double trainSeconds = 0;  // all windows, for the ETA
};

// Every rank reaches a log point at the same step: the window's mean loss and image count over
// all ranks, reduced on the group's device (a kNccl group reduces GPU memory only).
std::pair<double, double> reduceWindow(Loop& loop, double meanLoss, std::int64_t images) {
  auto stats =
      torch::tensor({meanLoss, static_cast<double>(images)}, torch::kDouble).to(loop.device);
  resnet_ddp::syncDevice(loop.device);  // the copy is done before NCCL reads it
  loop.group.allReduce(dtrun::ddp::bufferOf(stats), rt::ReduceOp::kSum);
  stats = stats.cpu();
  return {stats[0].item<double>() / loop.ctx.worldSize, stats[1].item<double>()};
}

void logWindow(Loop& loop, std::int64_t epoch, std::int64_t step) {
  const auto window = loop.timer.endWindow();
  loop.trainSeconds += window.seconds;
  const double meanLoss = loop.training.takeLossSum() / static_cast<double>(window.steps);
  const auto [loss, images] = reduceWindow(loop, meanLoss, window.images);
  if (loop.ctx.rank == 0) {
    const double eta = loop.trainSeconds / static_cast<double>(loop.stepsDone) *
                       static_cast<double>(loop.totalSteps - loop.stepsDone);
    std::cout << "epoch " << epoch + 1 << "/" << loop.args.numEpochs << " step " << step + 1 << "/"
              << loop.stepsPerEpoch << " loss " << std::fixed << std::setprecision(4) << loss
              << " images/s " << std::setprecision(1) << images / window.seconds << " eta "
              << hms(eta);
    if (window.gpuMsPerStep > 0) {
      std::cout << " gpu ms/step " << std::setprecision(2) << window.gpuMsPerStep;
    }
    std::cout << std::defaultfloat << std::endl;
  }
  loop.timer.startWindow();
}

void endEpoch(Loop& loop, std::int64_t epoch) {
  if (loop.ctx.rank == 0) {
    std::ostringstream line;
    line << "epoch " << epoch + 1 << "/" << loop.args.numEpochs << ":";
    if (!loop.args.noEval) {
      line << " test accuracy " << std::fixed << std::setprecision(4)
           << evaluate(loop.model, loop.test, 256, loop.normalise) << " (" << loop.test.size()
           << " images)";
    }
    if (!loop.args.noSave) {
      fs::create_directories(loop.args.modelDir);
      saveCheckpoint(loop.model, loop.optimizer, epoch + 1, loop.checkpoint);
      line << (loop.args.noEval ? "" : ",") << " checkpoint " << loop.checkpoint.string();
    }
    std::cout << line.str() << std::endl;
  }
  loop.group.barrier();  // the others wait while rank 0 evaluates and saves
}

void runEpoch(Loop& loop, std::int64_t epoch) {
  loop.sampler.setEpoch(epoch);
  const auto indices = loop.sampler.indices();
  const auto indexTensor =
      torch::from_blob(const_cast<std::int64_t*>(indices.data()),  // NOLINT: read only
                       {static_cast<std::int64_t>(indices.size())}, torch::kLong)
          .to(loop.device);
  std::mt19937_64 rng(loop.args.randomSeed * 7919ULL +
                      static_cast<std::uint64_t>(epoch) * 104729ULL +
                      static_cast<std::uint64_t>(loop.ctx.rank));
  loop.model->train();
  loop.timer.startWindow();
  for (std::int64_t step = 0; step < loop.stepsPerEpoch; ++step) {
    const auto first = step * loop.args.batchSize;
    const auto n = std::min<std::int64_t>(loop.args.batchSize, loop.shard - first);
    const StepInputs inputs{
        indexTensor.narrow(0, first, n),
        loop.args.noAugment ? torch::Tensor() : resnet_ddp::cropIndices(n, rng, loop.device)};
    loop.timer.beforeStep(loop.stepsDone);
    loop.runner.run(inputs, n, loop.stepsDone);
    ++loop.stepsDone;
    loop.timer.afterStep(n, loop.stepsDone);
    if ((step + 1) % loop.args.logEvery == 0 || step + 1 == loop.stepsPerEpoch) {
      logWindow(loop, epoch, step);
    }
  }
  endEpoch(loop, epoch);
}

torch::Device pickDevice(const Args& args, const rt::Context& ctx) {
  if (args.device != "cuda") {
    return torch::Device(torch::kCPU);
  }
  if (!torch::cuda::is_available()) {
    throw std::runtime_error(
        "--device cuda: libtorch sees no CUDA device (or was built without CUDA); use --device "
        "cpu");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ctx.localRank));
}

// On a GPU the whole (CIFAR-sized) data set lives there: no host copy per step.
Dataset onDevice(Dataset d, const torch::Device& device) {
  if (d.size() > 0) {
    d.images = d.images.to(device);
    d.labels = d.labels.to(device);
  }
  return d;
}

// Whether to capture the step in a CUDA graph. Only with one rank: dtrun::ddp all-reduces through
// libdtrt, whose NCCL calls run on libdtrt's own stream (ProcessGroup takes none) and wait for
// completion on the host, which a stream capture can neither record nor allow.
bool wantGraph(const Args& args, const rt::Context& ctx) {
  if (!args.cudaGraph) {
    return false;
  }
  if (ctx.worldSize > 1) {
    if (ctx.rank == 0) {
      std::cout << "cuda graph: not used: " << ctx.worldSize
                << " ranks, and libdtrt's NCCL all_reduce (on its own stream, waited for on the "
                   "host) cannot be captured; running eagerly"
                << std::endl;
    }
    return false;
  }
  return true;
}

std::int64_t parameterCount(ResNet18& model) {
  std::int64_t count = 0;
  for (const auto& p : model->parameters()) {
    count += p.numel();
  }
  return count;
}

void printThroughput(const Loop& loop, std::int64_t warmupSteps, bool graphUsed,
                     double exposedComm) {
  const auto& m = loop.timer.measured();
  const auto& args = loop.args;
  const double perRank = m.seconds > 0 ? static_cast<double>(m.images) / m.seconds : 0;
  std::cout << "throughput: " << std::fixed << std::setprecision(1) << perRank * loop.ctx.worldSize
            << " images/s (" << loop.ctx.worldSize << " rank"
            << (loop.ctx.worldSize == 1 ? "" : "s") << ", " << m.steps << " steps after "
            << warmupSteps << " warm-up, batch " << args.batchSize << " per rank, precision "
            << args.precision << ", channels_last " << onOff(args.channelsLast) << ", cuda graph "
            << onOff(graphUsed);
  if (m.gpuSteps > 0) {
    std::cout << ", gpu " << std::setprecision(2) << m.gpuMs / static_cast<double>(m.gpuSteps)
              << " ms/step";
  }
  std::cout << ", exposed all_reduce " << std::setprecision(2) << exposedComm << " s)"
            << std::defaultfloat << std::endl;
}

int run(const Args& args) {
  const auto ctx = rt::init();
  const bool lead = ctx.rank == 0;
  if (args.threads > 0) {
    torch::set_num_threads(args.threads);
  }
  // Same seed everywhere, as in the seed script; DDP's broadcast would fix a difference anyway.
  torch::manual_seed(args.randomSeed);
  const auto device = pickDevice(args, ctx);
  // Before any GPU work: the model, DDP (its gradient hooks run on the stream they were made
  // on) and every step run on this stream.
  const resnet_ddp::ComputeStream computeStream(device);
  const auto train = onDevice(loadCifar(args.dataDir, true), device);
  const auto test =
      onDevice(args.noEval || !lead ? Dataset{} : loadCifar(args.dataDir, false), device);
  if (device.is_cuda()) {
    at::globalContext().setBenchmarkCuDNN(true);  // fixed shapes: let cuDNN pick its fastest
  }

  auto model = ResNet18(args.width);
  model->to(device);
  torch::optim::SGD optimizer(
      model->parameters(),
      torch::optim::SGDOptions(args.learningRate).momentum(0.9).weight_decay(1e-5));
  const fs::path checkpoint = fs::path(args.modelDir) / args.modelFilename;
  std::int64_t startEpoch = 0;
  if (args.resume) {
    startEpoch = loadCheckpoint(model, optimizer, checkpoint, device);
    if (lead) {
      std::cout << "resumed from " << checkpoint.string() << ": continuing at epoch "
                << startEpoch + 1 << std::endl;
    }
  }
  if (args.channelsLast) {  // after loading, which reads tensors back contiguous
    resnet_ddp::toChannelsLast(*model);
    resnet_ddp::momentumToChannelsLast(optimizer);
  }

  dtrun::ddp::Options options;
  options.overlap = !args.noOverlap;
  options.bucketBytes = args.bucketKb << 10;
  // One group: DDP broadcasts on it (and derives its communication thread's group from it); the
  // demo averages the progress lines' losses and waits for rank 0's evaluation on it.
  const auto group = rt::ProcessGroup::create(
      ctx, device.is_cuda() ? rt::Backend::kNccl
                            : (args.backend == "gloo" ? rt::Backend::kGloo : rt::Backend::kTcp));
  dtrun::ddp::DistributedDataParallel ddp(*group, model.ptr(), options);

  dtrun::ddp::DistributedSampler sampler(static_cast<std::size_t>(train.size()), ctx.rank,
                                         ctx.worldSize, args.randomSeed);
  const auto shard = static_cast<std::int64_t>(sampler.numSamples());
  std::int64_t stepsPerEpoch = (shard + args.batchSize - 1) / args.batchSize;
  if (args.maxSteps > 0) {
    stepsPerEpoch = std::min<std::int64_t>(stepsPerEpoch, args.maxSteps);
  }
  const bool graph = wantGraph(args, ctx);
  if (lead) {
    const int threads = torch::get_num_threads();
    std::cout << "resnet_ddp: " << ctx.worldSize << " rank" << (ctx.worldSize == 1 ? "" : "s")
              << ", " << train.size() << " train / " << test.size()
              << " test images, ResNet-18 width " << args.width << " (" << parameterCount(model)
              << " parameters, " << ddp.bucketCount() << " bucket"
              << (ddp.bucketCount() == 1 ? "" : "s") << "), batch " << args.batchSize
              << " per rank, " << stepsPerEpoch << " steps per epoch, " << threads << " thread"
              << (threads == 1 ? "" : "s") << " per rank, precision " << args.precision
              << ", channels_last " << onOff(args.channelsLast) << ", cuda graph "
              << (graph ? "wanted" : "off") << std::endl;
  }

  const resnet_ddp::Normaliser normalise(device, args.channelsLast);
  // Grads set to none between steps, as Python's default, where nothing needs their memory
  // kept: DDP's bucket views (several ranks) and a graph's fixed addresses do.
  Training training(model, optimizer, ddp, train, normalise, device, args.precision == "bf16",
                    /*setToNone=*/ctx.worldSize == 1 && !graph);
  StepRunner runner(training, graph, args.batchSize, lead);
  // With a graph, the capture step stays out of the measured window.
  const std::int64_t warmupSteps =
      graph ? std::max<std::int64_t>(args.warmupSteps, kGraphWarmupSteps + 1) : args.warmupSteps;
  StepTimer timer(device, warmupSteps);
  Loop loop{.args = args,
            .ctx = ctx,
            .group = *group,
            .sampler = sampler,
            .training = training,
            .runner = runner,
            .timer = timer,
            .model = model,
            .optimizer = optimizer,
            .test = test,
            .normalise = normalise,
            .device = device,
            .checkpoint = checkpoint,
            .shard = shard,
            .stepsPerEpoch = stepsPerEpoch,
            .totalSteps = (args.numEpochs - startEpoch) * stepsPerEpoch};
  for (std::int64_t epoch = startEpoch; epoch < args.numEpochs; ++epoch) {
    runEpoch(loop, epoch);
  }
  if (lead) {
    printThroughput(loop, warmupSteps, runner.graphUsed(), ddp.exposedCommSeconds());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything, option set-up included, inside the try: no exception escapes main.
  try {
    CLI::App app{"resnet_ddp: ResNet-18 on CIFAR-10 with dtrun::ddp (run it under dtrun)"};
    Args a;
    app.add_option("--num_epochs,--num-epochs", a.numEpochs, "Number of training epochs")
        ->capture_default_str();
    app.add_option("--batch_size,--batch-size", a.batchSize, "Training batch size per process")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    app.add_option("--learning_rate,--learning-rate", a.learningRate, "Learning rate")
        ->capture_default_str();
    app.add_option("--random_seed,--random-seed", a.randomSeed, "Random seed")
        ->capture_default_str();
    app.add_option("--model_dir,--model-dir", a.modelDir, "Directory for saving models")
        ->capture_default_str();
    app.add_option("--model_filename,--model-filename", a.modelFilename, "Checkpoint file name")
        ->capture_default_str();
    app.add_flag("--resume", a.resume, "Resume training from the saved checkpoint");
    app.add_option("--data-dir,--data_dir", a.dataDir, "Folder with CIFAR-10's binary files")
        ->capture_default_str();
    app.add_option("--width", a.width, "Channels of the first stage (64 = ResNet-18)")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--max-steps", a.maxSteps, "Steps per epoch at most (0 = the whole shard)")
        ->capture_default_str();
    app.add_option("--log-every", a.logEvery, "Steps between progress lines")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--warmup-steps", a.warmupSteps, "Steps left out of the throughput figure")
        ->capture_default_str();
    app.add_option("--threads", a.threads, "Torch threads per rank (0 = OMP_NUM_THREADS)")
        ->capture_default_str();
    app.add_flag("--no-eval", a.noEval, "Skip the evaluation after each epoch");
    app.add_flag("--no-save", a.noSave, "Save no checkpoint");
    app.add_flag("--no-augment", a.noAugment, "No random crop and flip");
    app.add_flag("--no-overlap", a.noOverlap, "All-reduce gradients after backward, not during it");
    app.add_option("--bucket-kb", a.bucketKb, "DDP bucket size in KiB")->capture_default_str();
    app.add_option("--backend", a.backend, "CPU backend")
        ->check(CLI::IsMember({"tcp", "gloo"}))
        ->capture_default_str();
    app.add_option("--device", a.device, "cpu, or cuda: this rank's GPU with the NCCL backend")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    app.add_option("--precision", a.precision,
                   "fp32, or bf16: forward and loss under bf16 autocast (backward and the "
                   "optimizer step outside it)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    app.add_flag("--channels-last,--channels_last", a.channelsLast,
                 "Convolution weights and input batches in channels-last (NHWC) layout");
    app.add_flag("--cuda-graph,--cuda_graph", a.cudaGraph,
                 "Capture the whole training step as a CUDA graph and replay it (--device cuda, "
                 "one rank, a GPU build)");
    CLI11_PARSE(app, argc, argv);
    if (a.cudaGraph && (a.device != "cuda" || !resnet_ddp::kCudaGraphsBuilt)) {
      std::cerr << "resnet_ddp: --cuda-graph needs "
                << (a.device != "cuda"
                        ? "--device cuda"
                        : "a build with CUDA graph support (scripts/gpu/build_resnet_ddp.sh "
                          "against a CUDA torch; this one was built without DTRUN_TORCH_CUDA)")
                << std::endl;
      return 2;
    }
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "resnet_ddp: " << e.what() << std::endl;
    rt::recordError(e.what());
    return 1;
  }
}
