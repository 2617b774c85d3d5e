// resnet_ddp: the seed's resnet_ddp.py in C++: ResNet-18 (CIFAR variant: 3x3 stem, no max-pool)
// trained on CIFAR-10 with dtrun::ddp over libdtrt, one process per rank. Reads the official
// binary files (data_batch_1..5.bin, test_batch.bin: records of 1 label byte + 3072 pixel
// bytes, R, G, B planes of 32x32); augments with a random 32x32 crop of the zero-padded 40x40
// image and a random horizontal flip; normalises like the seed. Rank 0 evaluates on
// test_batch.bin and saves a checkpoint (model, optimizer, next epoch) after every epoch;
// --resume loads it on every rank and continues with the next epoch. --device cuda trains on the
// rank's GPU (cuda:LOCAL_RANK) with a kNccl group, the data set held on the GPU.
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
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include "dtrun/ddp.h"
#include "dtrun/runtime.h"

namespace {

namespace rt = dtrun::runtime;
namespace fs = std::filesystem;

// ---- model --------------------------------------------------------------------------------

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module(
            "conv2", torch::nn::Conv2d(
                         torch::nn::Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          torch::nn::Sequential(
              torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
              torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn2(conv2(torch::relu(bn1(conv1(x)))));
    y = y + (shortcut ? shortcut->forward(x) : x);
    return torch::relu(y);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

// ResNet-18 for 32x32 inputs; width 64 is the standard one (11.2 M parameters).
struct ResNet18Impl : torch::nn::Module {
  explicit ResNet18Impl(std::int64_t width, std::int64_t classes = 10)
      : conv1(register_module(
            "conv1", torch::nn::Conv2d(
                         torch::nn::Conv2dOptions(3, width, 3).stride(1).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(width))),
        layer1(register_module("layer1", makeLayer(width, width, 1))),
        layer2(register_module("layer2", makeLayer(width, 2 * width, 2))),
        layer3(register_module("layer3", makeLayer(2 * width, 4 * width, 2))),
        layer4(register_module("layer4", makeLayer(4 * width, 8 * width, 2))),
        fc(register_module("fc", torch::nn::Linear(8 * width, classes))) {}
  static torch::nn::Sequential makeLayer(std::int64_t in, std::int64_t out, std::int64_t stride) {
    return torch::nn::Sequential(BasicBlock(in, out, stride), BasicBlock(out, out, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
    y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
    return fc(y);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Sequential layer1, layer2, layer3, layer4;
  torch::nn::Linear fc;
};
TORCH_MODULE(ResNet18);

// ---- data ---------------------------------------------------------------------------------

constexpr std::int64_t kRecordBytes = 3073;

struct Dataset {
  torch::Tensor images;  // uint8 [n, 3, 32, 32]
  torch::Tensor labels;  // int64 [n]
  [[nodiscard]] std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Appends the records of one CIFAR-10 binary file; throws on a malformed file.
void readCifarFile(const fs::path& path, std::vector<std::uint8_t>& pixels,
                   std::vector<std::int64_t>& labels) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path.string());
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const auto size = static_cast<std::int64_t>(bytes.size());
  if (size == 0 || size % kRecordBytes != 0) {
    throw std::runtime_error(path.string() + ": " + std::to_string(size) +
                             " bytes is not a multiple of the 3073-byte CIFAR-10 record");
  }
  for (std::int64_t off = 0; off < size; off += kRecordBytes) {
    const auto label = static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(off)]);
    if (label > 9) {
      throw std::runtime_error(path.string() + ": label " + std::to_string(label) + " at record " +
                               std::to_string(off / kRecordBytes) + " (not 0-9)");
    }
    labels.push_back(label);
    pixels.insert(pixels.end(), bytes.begin() + off + 1, bytes.begin() + off + kRecordBytes);
  }
}

Dataset loadCifar(const fs::path& dir, bool train) {
  std::vector<fs::path> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) {
      const auto p = dir / ("data_batch_" + std::to_string(i) + ".bin");
      if (fs::exists(p)) {
        files.push_back(p);
      }
    }
  } else if (fs::exists(dir / "test_batch.bin")) {
    files.push_back(dir / "test_batch.bin");
  }
  if (files.empty()) {
    throw std::runtime_error(
        "no CIFAR-10 " + std::string(train ? "data_batch_*.bin" : "test_batch.bin") + " in " +
        dir.string() + " (binary version; or scripts/make-cifar10-sample DIR)");
  }
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  for (const auto& f : files) {
    readCifarFile(f, pixels, labels);
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  Dataset d;
  d.images = torch::from_blob(pixels.data(), {n, 3, 32, 32}, torch::kUInt8).clone();
  d.labels = torch::from_blob(labels.data(), {n}, torch::kLong).clone();
  return d;
}

// uint8 images -> normalised float (the seed's transforms.Normalize constants).
torch::Tensor normalise(const torch::Tensor& images) {
  static const auto kMean = torch::tensor({0.4914F, 0.4822F, 0.4465F}).view({1, 3, 1, 1});
  static const auto kStd = torch::tensor({0.2023F, 0.1994F, 0.2010F}).view({1, 3, 1, 1});
  return (images.to(torch::kFloat).div(255.0F) - kMean.to(images.device())) /
         kStd.to(images.device());
}

// RandomCrop(32, padding=4) + RandomHorizontalFlip on a uint8 batch.
torch::Tensor augment(const torch::Tensor& images, std::mt19937_64& rng) {
  const auto padded = torch::constant_pad_nd(images, {4, 4, 4, 4}, 0);
  std::uniform_int_distribution<std::int64_t> offset(0, 8);
  std::bernoulli_distribution flip(0.5);
  auto out = torch::empty_like(images);
  for (std::int64_t i = 0; i < images.size(0); ++i) {
    auto crop = padded[i].narrow(1, offset(rng), 32).narrow(2, offset(rng), 32);
    out[i].copy_(flip(rng) ? crop.flip({2}) : crop);
  }
  return out;
}

double evaluate(ResNet18& model, const Dataset& test, std::int64_t batch) {
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

// ---- checkpoints --------------------------------------------------------------------------

void saveCheckpoint(ResNet18& model, torch::optim::SGD& optimizer, std::int64_t nextEpoch,
                    const fs::path& path) {
  torch::serialize::OutputArchive root;
  torch::serialize::OutputArchive modelArchive;
  model->save(modelArchive);
  root.write("model", modelArchive);
  torch::serialize::OutputArchive optimArchive;
  optimizer.save(optimArchive);
  root.write("optimizer", optimArchive);
  root.write("next_epoch", torch::tensor(nextEpoch));
  const auto tmp = fs::path(path.string() + ".tmp");
  root.save_to(tmp.string());
  fs::rename(tmp, path);  // readers never see a half-written file
}

std::int64_t loadCheckpoint(ResNet18& model, torch::optim::SGD& optimizer, const fs::path& path,
                            const torch::Device& device) {
  torch::serialize::InputArchive root;
  root.load_from(path.string(), device);
  torch::serialize::InputArchive modelArchive;
  root.read("model", modelArchive);
  model->load(modelArchive);
  torch::serialize::InputArchive optimArchive;
  root.read("optimizer", optimArchive);
  optimizer.load(optimArchive);
  torch::Tensor next;
  root.read("next_epoch", next);
  return next.item<std::int64_t>();
}

// ---- training -----------------------------------------------------------------------------

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
};

std::string hms(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, std::round(seconds)));
  std::ostringstream out;
  out << s / 3600 << ':' << std::setw(2) << std::setfill('0') << (s / 60) % 60 << ':'
      << std::setw(2) << std::setfill('0') << s % 60;
  return out.str();
}

int run(const Args& args) {
  const auto ctx = rt::init();
  const bool lead = ctx.rank == 0;
  if (args.threads > 0) {
    torch::set_num_threads(args.threads);
  }
  // Same seed everywhere, as in the seed script; DDP's broadcast would fix a difference anyway.
  torch::manual_seed(args.randomSeed);
  const bool cuda = args.device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    throw std::runtime_error(
        "--device cuda: libtorch sees no CUDA device (or was built without "
        "CUDA); use --device cpu");
  }
  const torch::Device device =
      cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ctx.localRank))
           : torch::Device(torch::kCPU);
  // On a GPU the whole (CIFAR-sized) data set lives there: no host copy per step.
  auto onDevice = [&](Dataset d) {
    if (d.size() > 0) {
      d.images = d.images.to(device);
      d.labels = d.labels.to(device);
    }
    return d;
  };
  const auto train = onDevice(loadCifar(args.dataDir, true));
  const auto test = onDevice(args.noEval || !lead ? Dataset{} : loadCifar(args.dataDir, false));
  if (cuda) {
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

  dtrun::ddp::Options options;
  options.overlap = !args.noOverlap;
  options.bucketBytes = args.bucketKb << 10;
  // One group: DDP broadcasts on it (and derives its communication thread's group from it); the
  // demo averages the progress lines' losses and waits for rank 0's evaluation on it.
  const auto group = rt::ProcessGroup::create(
      ctx, cuda ? rt::Backend::kNccl
                : (args.backend == "gloo" ? rt::Backend::kGloo : rt::Backend::kTcp));
  dtrun::ddp::DistributedDataParallel ddp(*group, model.ptr(), options);

  dtrun::ddp::DistributedSampler sampler(static_cast<std::size_t>(train.size()), ctx.rank,
                                         ctx.worldSize, args.randomSeed);
  const auto shard = static_cast<std::int64_t>(sampler.numSamples());
  std::int64_t stepsPerEpoch = (shard + args.batchSize - 1) / args.batchSize;
  if (args.maxSteps > 0) {
    stepsPerEpoch = std::min<std::int64_t>(stepsPerEpoch, args.maxSteps);
  }
  std::int64_t parameterCount = 0;
  for (const auto& p : model->parameters()) {
    parameterCount += p.numel();
  }
  if (lead) {
    std::cout << "resnet_ddp: " << ctx.worldSize << " rank" << (ctx.worldSize == 1 ? "" : "s")
              << ", " << train.size() << " train / " << test.size()
              << " test images, ResNet-18 width " << args.width << " (" << parameterCount
              << " parameters, " << ddp.bucketCount() << " bucket"
              << (ddp.bucketCount() == 1 ? "" : "s") << "), batch " << args.batchSize
              << " per rank, " << stepsPerEpoch << " steps per epoch, " << torch::get_num_threads()
              << " thread" << (torch::get_num_threads() == 1 ? "" : "s") << " per rank"
              << std::endl;
  }

  torch::nn::CrossEntropyLoss criterion;
  using Clock = std::chrono::steady_clock;
  const auto totalSteps = (args.numEpochs - startEpoch) * stepsPerEpoch;
  std::int64_t stepsDone = 0;
  double trainSeconds = 0;     // all steps, for the ETA
  double measuredSeconds = 0;  // after the warm-up, for the throughput figure
  std::int64_t measuredSteps = 0;
  std::int64_t measuredImages = 0;
  for (std::int64_t epoch = startEpoch; epoch < args.numEpochs; ++epoch) {
    sampler.setEpoch(epoch);
    const auto indices = sampler.indices();
    const auto indexTensor =
        torch::from_blob(const_cast<std::int64_t*>(indices.data()),  // NOLINT: read only
                         {static_cast<std::int64_t>(indices.size())}, torch::kLong)
            .to(device);
    std::mt19937_64 rng(args.randomSeed * 7919ULL + static_cast<std::uint64_t>(epoch) * 104729ULL +
                        static_cast<std::uint64_t>(ctx.rank));
    model->train();
    double windowLoss = 0;
    double windowSeconds = 0;
    std::int64_t windowSteps = 0;
    std::int64_t windowImages = 0;
    for (std::int64_t step = 0; step < stepsPerEpoch; ++step) {
      const auto t0 = Clock::now();
      const auto first = step * args.batchSize;
      const auto n = std::min<std::int64_t>(args.batchSize, shard - first);
      const auto batchIdx = indexTensor.narrow(0, first, n);
      auto images = train.images.index_select(0, batchIdx);
      if (!args.noAugment) {
        images = augment(images, rng);
      }
      const auto labels = train.labels.index_select(0, batchIdx);
      ddp.prepareForward();
      optimizer.zero_grad();
      auto loss = criterion(model->forward(normalise(images)), labels);
      loss.backward();
      ddp.synchronizeGradients();
      optimizer.step();
      // item() waits for the step's kernels: on a GPU the time is then the step's, not only that
      // of queueing it.
      windowLoss += loss.item<double>();
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      ++stepsDone;
      trainSeconds += seconds;
      windowSeconds += seconds;
      ++windowSteps;
      windowImages += n;
      if (stepsDone > args.warmupSteps) {
        measuredSeconds += seconds;
        ++measuredSteps;
        measuredImages += n;
      }
      if ((step + 1) % args.logEvery == 0 || step + 1 == stepsPerEpoch) {
        // Every rank reaches this line at the same step: average the losses and image counts.
        // On the group's device: a kNccl group reduces GPU memory only.
        auto statsTensor = torch::tensor({windowLoss / static_cast<double>(windowSteps),
                                          static_cast<double>(windowImages)},
                                         torch::kDouble)
                               .to(device);
        if (cuda) {
          torch::cuda::synchronize(device.index());  // the copy is done before NCCL reads it
        }
        group->allReduce(dtrun::ddp::bufferOf(statsTensor), rt::ReduceOp::kSum);
        statsTensor = statsTensor.cpu();
        const std::vector<double> stats = {statsTensor[0].item<double>(),
                                           statsTensor[1].item<double>()};
        if (lead) {
          const double eta = trainSeconds / static_cast<double>(stepsDone) *
                             static_cast<double>(totalSteps - stepsDone);
          std::cout << "epoch " << epoch + 1 << "/" << args.numEpochs << " step " << step + 1 << "/"
                    << stepsPerEpoch << " loss " << std::fixed << std::setprecision(4)
                    << stats[0] / ctx.worldSize << " images/s " << std::setprecision(1)
                    << stats[1] / windowSeconds << std::defaultfloat << " eta " << hms(eta)
                    << std::endl;
        }
        windowLoss = 0;
        windowSeconds = 0;
        windowSteps = 0;
        windowImages = 0;
      }
    }
    if (lead) {
      std::ostringstream line;
      line << "epoch " << epoch + 1 << "/" << args.numEpochs << ":";
      if (!args.noEval) {
        line << " test accuracy " << std::fixed << std::setprecision(4)
             << evaluate(model, test, 256) << " (" << test.size() << " images)";
      }
      if (!args.noSave) {
        fs::create_directories(args.modelDir);
        saveCheckpoint(model, optimizer, epoch + 1, checkpoint);
        line << (args.noEval ? "" : ",") << " checkpoint " << checkpoint.string();
      }
      std::cout << line.str() << std::endl;
    }
    group->barrier();  // the others wait while rank 0 evaluates and saves
  }
  if (lead) {
    const double perRank =
        measuredSeconds > 0 ? static_cast<double>(measuredImages) / measuredSeconds : 0;
    std::cout << "throughput: " << std::fixed << std::setprecision(1) << perRank * ctx.worldSize
              << " images/s (" << ctx.worldSize << " rank" << (ctx.worldSize == 1 ? "" : "s")
              << ", " << measuredSteps << " steps after " << args.warmupSteps << " warm-up, batch "
              << args.batchSize << " per rank, exposed all_reduce " << std::setprecision(2)
              << ddp.exposedCommSeconds() << " s)" << std::endl;
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
    CLI11_PARSE(app, argc, argv);
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "resnet_ddp: " << e.what() << std::endl;
    rt::recordError(e.what());
    return 1;
  }
}
