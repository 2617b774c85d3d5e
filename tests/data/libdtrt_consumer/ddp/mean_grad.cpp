// A dtrun::ddp program built outside dtrun's tree against the installed package: a
// torch::nn::Linear(4, 1) wrapped in DistributedDataParallel, one backward pass on rank r's input
// (four values r + 1), loss = the output. The weight's gradient is the input, so after
// synchronizeGradients() every rank holds the mean over ranks: with 2 ranks each rank prints
// "mean_grad: rank R of 2: weight 1.5 1.5 1.5 1.5 bias 1".
#include <cstdio>
#include <exception>
#include <memory>

#include <torch/torch.h>

#include "dtrun/ddp.h"
#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

int main() {
  try {
    const rt::Context ctx = rt::init();
    auto group = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
    torch::set_num_threads(1);
    auto model = std::make_shared<torch::nn::LinearImpl>(4, 1);
    dtrun::ddp::DistributedDataParallel ddp(*group, model);
    ddp.prepareForward();
    const auto input = torch::full({1, 4}, static_cast<double>(ctx.rank + 1), torch::kFloat32);
    model->forward(input).sum().backward();
    ddp.synchronizeGradients();
    const auto w = model->weight.grad().contiguous();
    const float* g = w.data_ptr<float>();
    std::printf("mean_grad: rank %d of %d: weight %g %g %g %g bias %g\n", ctx.rank, ctx.worldSize,
                g[0], g[1], g[2], g[3], model->bias.grad().item<float>());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mean_grad: %s\n", e.what());
    return 1;
  }
}
