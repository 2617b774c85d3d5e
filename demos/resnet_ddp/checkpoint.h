// resnet_ddp's checkpoint: the model, the optimizer (its momentum buffers) and the epoch to go on
// with, in one torch archive written under a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <filesystem>

#include <torch/torch.h>

#include "model.h"

namespace resnet_ddp {

inline void saveCheckpoint(ResNet18& model, torch::optim::SGD& optimizer, std::int64_t nextEpoch,
                           const std::filesystem::path& path) {
  torch::serialize::OutputArchive root;
  torch::serialize::OutputArchive modelArchive;
  model->save(modelArchive);
  root.write("model", modelArchive);
  torch::serialize::OutputArchive optimArchive;
  optimizer.save(optimArchive);
  root.write("optimizer", optimArchive);
  root.write("next_epoch", torch::tensor(nextEpoch));
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  root.save_to(tmp.string());
  std::filesystem::rename(tmp, path);  // readers never see a half-written file
}

inline std::int64_t loadCheckpoint(ResNet18& model, torch::optim::SGD& optimizer,
                                   const std::filesystem::path& path, const torch::Device& device) {
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

}  // namespace resnet_ddp
