// resnet_ddp's model: ResNet-18 in its CIFAR variant (3x3 stem, no max-pool), as the seed's
// resnet_ddp.py and bench/ddp/torch_resnet_ddp.py build it.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace resnet_ddp {

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

}  // namespace resnet_ddp
